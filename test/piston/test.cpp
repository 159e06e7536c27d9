#include <iostream>
#include <optional>
#include <utility>

int main() {
    auto [first, second] = std::pair{'O', 'K'};
    std::optional<char> head = first;
    std::cout << *head << second << std::endl;
}
