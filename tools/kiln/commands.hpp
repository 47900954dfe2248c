// Subcommands of the `kiln` tool.
#pragma once

#include <string>
#include <vector>

namespace kiln::tool {
int info(const std::vector<std::string>& args);
int demo(const std::vector<std::string>& args);
int cache(const std::vector<std::string>& args);
int calibrate(const std::vector<std::string>& args);
int train(const std::vector<std::string>& args);
std::string human_bytes(unsigned long long bytes);
}  // namespace kiln::tool
