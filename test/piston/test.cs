using System;

public class Test
{
    public static void Main()
    {
        var (first, second) = ("O", "K");
        Console.WriteLine($"{first}{second}");
    }
}
