#pragma once
// Whether the test programs were built for the ASan/UBSan suite (INFRARSI_SANITIZE=ON sets
// INFRARSI_SANITIZED for every test target, tests/CMakeLists.txt).

namespace infrarsi::test {

/// True in the ASan/UBSan build, where every process runs 2-4x slower. The few tests that scale
/// their work or their own deadlines by it are listed in docs/testing.md "Sanitizers".
#ifdef INFRARSI_SANITIZED
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif

} // namespace infrarsi::test
