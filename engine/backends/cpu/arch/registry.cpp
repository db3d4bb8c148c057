// The architectures the CPU backend runs, by general.architecture; see architecture.hpp.
#include <string>

#include "engine/backends/cpu/architecture.hpp"

namespace loom::cpu {
namespace {

struct Entry {
    const char* name;
    std::unique_ptr<CpuArchitecture> (*make)(const model::GgufFile&, Compute&);
};

constexpr Entry kArchitectures[] = {
    {"llama", make_llama},    {"mistral", make_llama},   {"qwen2", make_llama},  {"qwen3", make_llama},
    {"qwen2moe", make_llama}, {"qwen3moe", make_llama},  {"gemma2", make_gemma}, {"gemma3", make_gemma},
    {"phi3", make_phi3},      {"gpt-oss", make_gpt_oss},
};

}  // namespace

std::string cpu_architectures() {
    std::string s;
    for (const Entry& e : kArchitectures) s += std::string(s.empty() ? "" : ", ") + e.name;
    return s;
}

std::unique_ptr<CpuArchitecture> load_architecture(const model::GgufFile& f, Compute& compute) {
    // The architecture first, so that an unknown one is refused by name rather than for a
    // missing `<arch>.*` key.
    const std::string arch = f.get_string("general.architecture");
    if (arch.empty()) throw model::ModelError("the GGUF has no general.architecture key");
    for (const Entry& e : kArchitectures)
        if (arch == e.name) return e.make(f, compute);
    throw model::ModelError("unsupported architecture '" + arch + "' (supported: " + cpu_architectures() + ")");
}

}  // namespace loom::cpu
