fn main() {
    let status = "OK";
    println!("{status}");
}
