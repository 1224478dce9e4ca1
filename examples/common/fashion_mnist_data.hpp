// Examples: a reader for the Fashion-MNIST data set (gzip-compressed IDX files).
//
// The Debian package `dataset-fashion-mnist` installs the four files under
// /usr/share/datasets/fashion-mnist:
//   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz   (60,000 examples)
//   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz    (10,000 examples)
// Images are 28 x 28 bytes (0 = background, 255 = ink); labels are classes 0..9.
//
// Every check names the file: a file that cannot be opened or decompressed, a wrong
// magic number, dimensions other than expected, a header that promises more bytes than the
// file holds (or fewer), labels outside 0..9, and images and labels of different counts all
// throw std::runtime_error.
#pragma once

#include <xtensor/xtensor.hpp>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace examples {

/// Where `dataset-fashion-mnist` installs the files.
inline constexpr std::string_view fashion_mnist_default_dir = "/usr/share/datasets/fashion-mnist";

/// The environment variable that overrides the data directory.
inline constexpr std::string_view fashion_mnist_dir_variable = "FASHION_MNIST_DIR";

/// Rows, columns and pixels of one image.
inline constexpr std::size_t fashion_mnist_rows = 28;
inline constexpr std::size_t fashion_mnist_cols = 28;
inline constexpr std::size_t fashion_mnist_pixels = fashion_mnist_rows * fashion_mnist_cols;

/// The number of classes.
inline constexpr std::size_t fashion_mnist_classes = 10;

/// One part of the data set (training or test).
struct fashion_mnist_split {
    /// Images, one per row, pixels scaled to [0, 1]: shape [n, 784].
    xt::xtensor<float, 2> images;
    /// The class of each image, 0..9.
    std::vector<std::uint8_t> labels;

    [[nodiscard]] std::size_t size() const noexcept { return labels.size(); }
};

/// The data directory: `flag` when not empty (e.g. from `--data DIR`), else the
/// environment variable FASHION_MNIST_DIR when set and not empty, else the Debian default.
[[nodiscard]] inline std::filesystem::path fashion_mnist_dir(std::string_view flag = {}) {
    if (!flag.empty()) {
        return std::filesystem::path(flag);
    }
    const std::string variable(fashion_mnist_dir_variable);
    if (const char* env = std::getenv(variable.c_str()); env != nullptr && *env != '\0') {
        return std::filesystem::path(env);
    }
    return std::filesystem::path(fashion_mnist_default_dir);
}

namespace detail {

[[noreturn]] inline void idx_fail(const std::filesystem::path& file, const std::string& problem) {
    throw std::runtime_error("fashion-mnist: " + file.string() + ": " + problem);
}

/// zlib's message for the last error of `in` (which may start with the file's name).
[[nodiscard]] inline std::string gz_message(gzFile_s* in, const std::filesystem::path& file) {
    int code = Z_OK;
    const char* message = gzerror(in, &code);
    std::string text = message != nullptr && *message != '\0' ? message : "unknown zlib error";
    const std::string prefix = file.string() + ": ";
    if (text.starts_with(prefix)) {
        text.erase(0, prefix.size());
    }
    return text;
}

/// The whole decompressed content of a gzip file (a plain file is read as it is, as zlib
/// does). Refuses more than `max_bytes` of content.
[[nodiscard]] inline std::vector<unsigned char> read_gzip(const std::filesystem::path& file,
                                                          std::size_t max_bytes) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
        idx_fail(file, "no such file (install the Debian package dataset-fashion-mnist, or "
                       "give the directory with --data DIR or FASHION_MNIST_DIR)");
    }
    struct closer {
        void operator()(gzFile_s* f) const noexcept { gzclose(f); }
    };
    std::unique_ptr<gzFile_s, closer> in(gzopen(file.c_str(), "rb"));
    if (!in) {
        idx_fail(file, "cannot be opened");
    }
    std::vector<unsigned char> out;
    constexpr std::size_t chunk = std::size_t{1} << 20;
    while (true) {
        const std::size_t at = out.size();
        out.resize(at + chunk);
        const int got = gzread(in.get(), out.data() + at, static_cast<unsigned>(chunk));
        if (got < 0) {
            idx_fail(file, "cannot be decompressed: " + gz_message(in.get(), file));
        }
        out.resize(at + static_cast<std::size_t>(got));
        if (out.size() > max_bytes) {
            idx_fail(file, "more than " + std::to_string(max_bytes) + " bytes of content");
        }
        if (got == 0) {
            break;
        }
    }
    // gzread returns 0 both at the end and on a truncated stream: ask which.
    int code = Z_OK;
    (void)gzerror(in.get(), &code);
    if (code != Z_OK) {
        idx_fail(file, "cannot be decompressed: " + gz_message(in.get(), file));
    }
    return out;
}

/// A big-endian 32-bit number at `at` (the caller has checked the bounds).
[[nodiscard]] inline std::uint32_t read_be32(const std::vector<unsigned char>& bytes,
                                             std::size_t at) noexcept {
    return (std::uint32_t{bytes[at]} << 24) | (std::uint32_t{bytes[at + 1]} << 16) |
           (std::uint32_t{bytes[at + 2]} << 8) | std::uint32_t{bytes[at + 3]};
}

/// The content of an IDX file of unsigned bytes with `dims` dimensions: the dimensions and
/// the offset of the data. Checks the magic number and that the data is exactly the size
/// the dimensions give.
struct idx_file {
    std::vector<unsigned char> bytes;
    std::vector<std::size_t> dims;
    std::size_t data_offset = 0;
};

[[nodiscard]] inline idx_file read_idx(const std::filesystem::path& file, std::size_t dims,
                                       std::size_t max_bytes) {
    idx_file idx;
    idx.bytes = read_gzip(file, max_bytes);
    const std::size_t header = 4 + 4 * dims;
    if (idx.bytes.size() < header) {
        idx_fail(file,
                 "too short for an IDX header (" + std::to_string(idx.bytes.size()) + " bytes)");
    }
    // Magic: two zero bytes, the type (0x08: unsigned byte), the number of dimensions.
    const std::uint32_t magic = read_be32(idx.bytes, 0);
    const std::uint32_t expected = 0x0800u | static_cast<std::uint32_t>(dims);
    if (magic != expected) {
        char text[64];
        std::snprintf(text, sizeof text, "bad magic number 0x%08x (expected 0x%08x)",
                      static_cast<unsigned>(magic), static_cast<unsigned>(expected));
        idx_fail(file, text);
    }
    std::size_t total = 1;
    for (std::size_t d = 0; d < dims; ++d) {
        const std::size_t n = read_be32(idx.bytes, 4 + 4 * d);
        idx.dims.push_back(n);
        if (n != 0 && total > max_bytes / n) {
            idx_fail(file,
                     "the header's dimensions exceed " + std::to_string(max_bytes) + " bytes");
        }
        total *= n;
    }
    const std::size_t present = idx.bytes.size() - header;
    if (present != total) {
        idx_fail(file, "the header promises " + std::to_string(total) + " bytes of data but " +
                           std::to_string(present) + " are present");
    }
    idx.data_offset = header;
    return idx;
}

/// At most this much decompressed content per file: the training images are 47 MB.
inline constexpr std::size_t idx_max_bytes = std::size_t{256} << 20;

} // namespace detail

namespace detail {

/// The images of a checked IDX image file, at most `limit` (all when 0).
[[nodiscard]] inline xt::xtensor<float, 2> idx_images(const std::filesystem::path& file,
                                                      const idx_file& idx, std::size_t limit) {
    if (idx.dims[1] != fashion_mnist_rows || idx.dims[2] != fashion_mnist_cols) {
        idx_fail(file, "images of " + std::to_string(idx.dims[1]) + " x " +
                           std::to_string(idx.dims[2]) + " (expected 28 x 28)");
    }
    const std::size_t n = limit != 0 ? std::min(idx.dims[0], limit) : idx.dims[0];
    xt::xtensor<float, 2> images = xt::empty<float>({n, fashion_mnist_pixels});
    const unsigned char* src = idx.bytes.data() + idx.data_offset;
    float* dst = images.data();
    for (std::size_t i = 0; i < n * fashion_mnist_pixels; ++i) {
        dst[i] = static_cast<float>(src[i]) * (1.0f / 255.0f);
    }
    return images;
}

/// The labels of a checked IDX label file, at most `limit` (all when 0).
[[nodiscard]] inline std::vector<std::uint8_t> idx_labels(const std::filesystem::path& file,
                                                          const idx_file& idx, std::size_t limit) {
    const std::size_t n = limit != 0 ? std::min(idx.dims[0], limit) : idx.dims[0];
    const auto first = idx.bytes.begin() + static_cast<std::ptrdiff_t>(idx.data_offset);
    std::vector<std::uint8_t> labels(first, first + static_cast<std::ptrdiff_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
        if (labels[i] >= fashion_mnist_classes) {
            idx_fail(file, "label " + std::to_string(labels[i]) + " at index " + std::to_string(i) +
                               " is not a class 0..9");
        }
    }
    return labels;
}

} // namespace detail

/// Reads an IDX image file (magic 0x00000803, images of 28 x 28): shape [n, 784], pixels
/// scaled to [0, 1]. At most `limit` images when `limit` is not 0.
/// @throws std::runtime_error naming the file
[[nodiscard]] inline xt::xtensor<float, 2> read_idx_images(const std::filesystem::path& file,
                                                           std::size_t limit = 0) {
    return detail::idx_images(file, detail::read_idx(file, 3, detail::idx_max_bytes), limit);
}

/// Reads an IDX label file (magic 0x00000801, classes 0..9). At most `limit` labels when
/// `limit` is not 0.
/// @throws std::runtime_error naming the file
[[nodiscard]] inline std::vector<std::uint8_t> read_idx_labels(const std::filesystem::path& file,
                                                               std::size_t limit = 0) {
    return detail::idx_labels(file, detail::read_idx(file, 1, detail::idx_max_bytes), limit);
}

/// Reads the training part (`train`: 60,000 examples) or the test part (10,000) from
/// `dir`, at most `limit` examples when `limit` is not 0.
/// @throws std::runtime_error naming the file when a file is missing or malformed, or
/// when its images and labels are of different counts
[[nodiscard]] inline fashion_mnist_split load_fashion_mnist(const std::filesystem::path& dir,
                                                            bool train, std::size_t limit = 0) {
    const std::string prefix = train ? "train" : "t10k";
    const auto images_file = dir / (prefix + "-images-idx3-ubyte.gz");
    const auto labels_file = dir / (prefix + "-labels-idx1-ubyte.gz");
    const auto images = detail::read_idx(images_file, 3, detail::idx_max_bytes);
    const auto labels = detail::read_idx(labels_file, 1, detail::idx_max_bytes);
    if (images.dims[0] != labels.dims[0]) {
        throw std::runtime_error("fashion-mnist: " + images_file.string() + " holds " +
                                 std::to_string(images.dims[0]) + " images but " +
                                 labels_file.string() + " holds " + std::to_string(labels.dims[0]) +
                                 " labels");
    }
    fashion_mnist_split split;
    split.images = detail::idx_images(images_file, images, limit);
    split.labels = detail::idx_labels(labels_file, labels, limit);
    return split;
}

} // namespace examples
