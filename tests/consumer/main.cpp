#include <petrel/all.hpp>

#include <asio/io_context.hpp>

#include <iostream>

int main() {
    asio::io_context io;
    petrel::server_node server(petrel::inproc_transport(io.get_executor(), petrel::inproc_hub{}));
    server.listen("app");
    server.close();
    std::cout << "petrel " << petrel::version_string << '\n';
    return 0;
}
