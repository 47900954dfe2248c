// Kiln's version.
#pragma once
#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
namespace kiln {
inline constexpr const char* version_string = "0.1.0";
}
