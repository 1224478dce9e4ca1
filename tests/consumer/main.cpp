#include <petrel/petrel.hpp>

#include <iostream>

int main() {
    std::cout << "petrel " << petrel::version_string << '\n';
    return 0;
}
