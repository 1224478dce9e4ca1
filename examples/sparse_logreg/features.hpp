// Sparse logistic regression example: hashed binary features of a Fashion-MNIST image.
//
// Each pixel is quantized to `levels` intensity levels; level 0 is the background. An
// image is described by the features it has (all binary):
//   - a bias feature, present in every image;
//   - (pixel, level) for every pixel that is not background;
//   - (pixel, level, right neighbour's level) for every horizontal pair of neighbours and
//     (pixel, level, lower neighbour's level) for every vertical pair, unless both are
//     background;
//   - (pixel, levels of the 2 x 2 square whose top-left corner it is), unless all four are
//     background.
// A feature is a 64-bit id (family, position, code) mixed with a seed by a bijective 64-bit
// mix; the top `hash_bits` bits of the result are its key, so distinct features collide
// only as often as random keys of that many bits do. Features of one image that collide
// share their key, which then counts once per feature (the usual hashing trick).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace examples::sparse_logreg {

/// A bijective 64-bit mix (the finalizer of SplitMix64): every input bit affects every
/// output bit.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/// Pixels of an image, its side, and the intensity levels of the quantization.
inline constexpr std::size_t image_side = 28;
inline constexpr std::size_t image_pixels = image_side * image_side;
inline constexpr unsigned levels = 4;

/// The most features one image can have.
inline constexpr std::size_t max_features_per_image =
    1 + image_pixels + 2 * image_side * (image_side - 1) + (image_side - 1) * (image_side - 1);

/// The quantized level (0 .. levels - 1) of a pixel of intensity `v` in [0, 1].
[[nodiscard]] constexpr std::uint8_t quantize(float v) noexcept {
    const float scaled = v * static_cast<float>(levels);
    if (!(scaled > 0.0f)) {
        return 0;
    }
    return static_cast<std::uint8_t>(std::min(static_cast<unsigned>(scaled), levels - 1));
}

/// Maps features to keys in [0, 2^bits).
class feature_hasher {
public:
    /// `bits` in [1, 63].
    feature_hasher(unsigned bits, std::uint64_t seed) noexcept
        : shift_(64 - bits), salt_(mix64(seed ^ 0x9e3779b97f4a7c15ULL)) {}

    /// The key of the feature of family `family` (< 256) at `position` (< 2^32) with
    /// `code` (< 2^16).
    [[nodiscard]] std::uint64_t operator()(std::uint64_t family, std::uint64_t position,
                                           std::uint64_t code) const noexcept {
        const std::uint64_t id = (family << 56) | (position << 16) | code;
        return mix64(id ^ salt_) >> shift_;
    }

private:
    unsigned shift_;
    std::uint64_t salt_;
};

/// The families of features.
enum family : std::uint64_t { bias = 0, pixel = 1, horizontal = 2, vertical = 3, square = 4 };

/// Appends the keys of the features of an image (its `image_pixels` quantized levels) to
/// `out`, in the order of the pixels; a key appears once per feature that hashes to it.
inline void image_features(std::span<const std::uint8_t> q, const feature_hasher& hash,
                           std::vector<std::uint64_t>& out) {
    out.push_back(hash(bias, 0, 0));
    for (std::size_t r = 0; r < image_side; ++r) {
        for (std::size_t c = 0; c < image_side; ++c) {
            const std::size_t p = r * image_side + c;
            const unsigned a = q[p];
            if (a != 0) {
                out.push_back(hash(pixel, p, a));
            }
            if (c + 1 < image_side) {
                const unsigned b = q[p + 1];
                if ((a | b) != 0) {
                    out.push_back(hash(horizontal, p, a * levels + b));
                }
            }
            if (r + 1 < image_side) {
                const unsigned b = q[p + image_side];
                if ((a | b) != 0) {
                    out.push_back(hash(vertical, p, a * levels + b));
                }
            }
            if (r + 1 < image_side && c + 1 < image_side) {
                const unsigned b = q[p + 1];
                const unsigned d = q[p + image_side];
                const unsigned e = q[p + image_side + 1];
                if ((a | b | d | e) != 0) {
                    out.push_back(hash(square, p, ((a * levels + b) * levels + d) * levels + e));
                }
            }
        }
    }
}

} // namespace examples::sparse_logreg
