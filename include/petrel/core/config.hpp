// Petrel: header-only or compiled once.
#pragma once

/// Petrel is header-only by default. Define `PETREL_SEPARATE_COMPILATION` in every
/// translation unit of a program (CMake: link `petrel::compiled`, which does both) to
/// compile the bodies of its non-template parts once, in the one translation unit that
/// includes `<petrel/impl/src.hpp>`, as Asio does with `ASIO_SEPARATE_COMPILATION`.
#if defined(PETREL_SEPARATE_COMPILATION)
#define PETREL_HEADER_ONLY 0
#define PETREL_DECL
#else
#define PETREL_HEADER_ONLY 1
#define PETREL_DECL inline
#endif
