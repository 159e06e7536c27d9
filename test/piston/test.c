#include <stdio.h>

#define status(x) _Generic((x), int: "OK", default: "FAIL")

int main(void) {
    puts(status(1));
    return 0;
}
