public class Main {
    record Status(String text) {}

    public static void main(String[] args) {
        var status = new Status("OK");
        String out = switch (status.text()) {
            case "OK" -> status.text();
            default -> "FAIL";
        };
        System.out.println(out);
    }
}
