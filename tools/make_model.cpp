// loom-make-model: writes a random-weight GGUF of a llama-family, Gemma 2/3, Phi-3 or
// mixture-of-experts (Mixtral-style llama, qwen2moe, qwen3moe, gpt-oss) shape and any tensor type.
//
// The file follows llama.cpp's tensor layout and GGUF keys (GGUF spec, ggml/docs/gguf.md;
// tensor names of llama.cpp's LLM_ARCH_LLAMA / QWEN2 / QWEN3 / GEMMA2 / GEMMA3 / PHI3):
//   token_embd.weight [dim, vocab], output_norm.weight [dim], output.weight [dim, vocab]
//   (absent with --tied), and per layer N: blk.N.attn_norm.weight [dim],
//   attn_q [dim, heads*hd], attn_k / attn_v [dim, kv_heads*hd], attn_output
//   [heads*hd, dim], ffn_norm [dim], ffn_gate / ffn_up [dim, ffn], ffn_down [ffn, dim];
//   qwen2 adds attn_q/k/v.bias, qwen3 adds attn_q_norm / attn_k_norm [hd]; gemma2 and
//   gemma3 add post_attention_norm and post_ffw_norm [dim] and tie the output (gemma3 also
//   has the q/k norms; keys: soft-caps 50/30 for gemma2, rope.freq_base_swa 10000 for
//   gemma3, attention.sliding_window 4096 unless --sliding-window); phi3 has attn_qkv [dim,
//   (heads + 2 kv_heads) hd] for attn_q/k/v, ffn_up [dim, 2 ffn] (gate, then up) and no
//   ffn_gate, and LongRoPE: rope_factors_short/long.weight [hd/2] (1 + N(0, 0.2^2)),
//   rope.scaling.original_context_length ctx / 4 and attn_factor sqrt(1 + ln 4 / ln(ctx / 4)).
// Mixtures (--experts N, with --experts-used K; qwen2moe, qwen3moe and gpt-oss default to 8 and
// 2): ffn_gate_inp [dim, N] (the router, F32, N(0, (3/sqrt(dim))^2) so that routing is far from
// uniform) and ffn_gate_exps / ffn_up_exps [dim, ffn, N], ffn_down_exps [ffn, dim, N] replace
// ffn_gate/up/down, with keys expert_count, expert_used_count and
// expert_feed_forward_length (= --ffn); qwen2moe adds the shared expert ffn_gate/up/down_shexp
// and its gate ffn_gate_inp_shexp [dim] (expert_shared_feed_forward_length = --ffn); gpt-oss
// has q/k/v/output biases, attn_sinks [heads], post_attention_norm in place of ffn_norm, the
// router's bias [N] and the experts' biases [ffn, N] / [dim, N], and a window of 128 on its
// even layers unless --sliding-window.
// --sliding-window N and --rope-scaling linear|yarn (with --rope-factor, --rope-orig-ctx)
// write `<arch>.attention.sliding_window` and `<arch>.rope.scaling.*` for any architecture.
// Values: norm weights 1 + N(0, 0.02^2) in F32; matrices and biases N(0, 0.02^2); the
// output matrix (or, when tied, the embedding) N(0, (3/sqrt(dim))^2), so that logits
// of an RMS-normalized state have a standard deviation of about 3.
// Types: --type sets every matrix; a row length that the type's block does not divide
// falls back like llama.cpp (Q2_K/Q3_K/IQ4_XS and the IQ1/IQ2/IQ3 types -> IQ4_NL, Q4_K ->
// Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; F16 when not even 32 divides it). The IQ1/IQ2/IQ3 types
// come from model/quant/quant_iq.cpp's simple quantizer (valid blocks, larger error than
// llama.cpp's, and slower than the other types' by far). q4_k_m approximates llama.cpp's
// Q4_K_M: Q4_K everywhere, except Q6_K for output.weight (token_embd when tied) and
// for attn_v and ffn_down in the layers of llama.cpp's use_more_bits rule (the first
// and last eighth of the layers, and every third layer in between).
// Vocabulary: SentencePiece-style (tokenizer.ggml.model = llama): <unk>, <s>, </s>,
// the 256 byte tokens <0x00>..<0xFF>, then filler pieces (U+2581 for a space, single
// characters, then letter pairs, triples, ...) with decreasing scores; --chat-template
// embeds a Jinja file as tokenizer.chat_template (GGUF spec, "LLM" KV keys).
// Speed: one thread per core; weights are drawn from a pool of 2^20 exact normal
// samples (Box-Muller) with xoshiro256+ indices, seeded per tensor and row range (so
// the file does not depend on the thread count); each thread writes multi-MiB
// sequential runs with pwrite.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numbers>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "model/gguf/ggml_types.hpp"
#include "model/gguf/gguf_writer.hpp"
#include "model/quant/quant.hpp"

namespace {

using loom::model::GgmlType;

struct Options {
    std::string out, arch = "llama", type = "f16", preset = "tiny", chat_template;
    int layers = 0, dim = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0, threads = 0;
    double rope_base = 0, rope_factor = 0;
    int sliding_window = 0, rope_orig_ctx = 0, experts = 0, experts_used = 0;
    std::string rope_scaling;
    bool tied = false, help = false;
    uint64_t seed = 1;
};

// The --help text; docs/api.md's "Engine flags" section says the same.
void usage(std::FILE* out) {
    std::fprintf(out,
                 "usage: loom-make-model --out PATH [options]\n"
                 "Writes a random-weight GGUF of a llama-family, Gemma, Phi-3 or mixture-of-experts shape\n"
                 "(llama.cpp's tensor names and keys).\n\n"
                 "  --out PATH          the GGUF file to write (required)\n"
                 "  --preset NAME       tiny (default: 2 layers, dim 256, vocab 512, ctx 1024),\n"
                 "                      llama3-8b, llama3-1b (their shapes; the flags below override)\n"
                 "  --arch NAME         llama (default), mistral, qwen2 (q/k/v biases), qwen3 (q/k norms),\n"
                 "                      gemma2, gemma3 (tied; window 4096), phi3 (fused QKV, gate/up; LongRoPE),\n"
                 "                      qwen2moe (shared expert), qwen3moe, gpt-oss (sinks, window 128, biases)\n"
                 "  --experts N         a mixture of N experts (llama, mistral: Mixtral-style; the MoE\n"
                 "                      architectures default to 8), --experts-used K of them per token (2)\n"
                 "  --layers N --dim N --heads N --kv-heads N --ffn N --vocab N (>= 260) --ctx N\n"
                 "  --rope-base X       RoPE frequency base\n"
                 "  --sliding-window N  declare attention.sliding_window N (gemma: its local layers)\n"
                 "  --rope-scaling T    linear|yarn, with --rope-factor X (> 1) and, for yarn,\n"
                 "                      --rope-orig-ctx N (default: --ctx / factor)\n"
                 "  --tied              no output.weight: the output projection is token_embd\n"
                 "  --type T            f32|f16 (default)|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|\n"
                 "                      q6_k|iq4_nl|iq4_xs|iq1_s|iq1_m|iq2_xxs|iq2_xs|iq2_s|iq3_xxs|iq3_s|\n"
                 "                      mxfp4|q4_k_m (every matrix; q4_k_m: llama.cpp's mixture; the IQ1/IQ2/IQ3\n"
                 "                      types by a simple quantizer: about 0.5 s of CPU time per million weights)\n"
                 "  --chat-template F   embed the Jinja file F as tokenizer.chat_template\n"
                 "  --seed N            weights seed (default 1); the file depends only on it and the shape\n"
                 "  --threads N         writer threads (default: one per core)\n"
                 "  -h, --help          print this help and exit\n");
}

// Applies the preset, then the explicit flags (so their order does not matter).
Options parse(int argc, char** argv) {
    Options o;
    std::map<std::string, std::string> flags;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--tied") {
            flags[a] = "1";
            continue;
        }
        if (a == "--help" || a == "-h") {
            flags["--help"] = "1";
            continue;
        }
        if (a.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + a + "' (see --help)");
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value (see --help)");
        flags[a] = argv[++i];
    }
    if (flags.count("--help")) {
        o.help = true;
        return o;
    }
    if (flags.count("--preset")) o.preset = flags["--preset"];
    if (o.preset == "tiny") {
        o.layers = 2, o.dim = 256, o.heads = 4, o.kv_heads = 2, o.ffn = 768, o.vocab = 512, o.ctx = 1024;
        o.rope_base = 10000;
    } else if (o.preset == "llama3-8b") {
        o.layers = 32, o.dim = 4096, o.heads = 32, o.kv_heads = 8, o.ffn = 14336, o.vocab = 128256, o.ctx = 8192;
        o.rope_base = 500000;
    } else if (o.preset == "llama3-1b") {  // Llama 3.2 1B shape; it ties its embeddings
        o.layers = 16, o.dim = 2048, o.heads = 32, o.kv_heads = 8, o.ffn = 8192, o.vocab = 128256, o.ctx = 8192;
        o.rope_base = 500000, o.tied = true;
    } else {
        throw std::invalid_argument("unknown preset " + o.preset);
    }
    auto num = [&](const char* key, auto& field) {
        if (auto it = flags.find(key); it != flags.end()) {
            char* end = nullptr;
            const double v = std::strtod(it->second.c_str(), &end);
            if (!end || *end || !(v > 0)) throw std::invalid_argument(std::string(key) + " needs a positive number");
            field = static_cast<std::remove_reference_t<decltype(field)>>(v);
            flags.erase(it);
        }
    };
    num("--layers", o.layers), num("--dim", o.dim), num("--heads", o.heads), num("--kv-heads", o.kv_heads);
    num("--ffn", o.ffn), num("--vocab", o.vocab), num("--ctx", o.ctx), num("--rope-base", o.rope_base);
    num("--threads", o.threads), num("--sliding-window", o.sliding_window), num("--rope-factor", o.rope_factor);
    num("--rope-orig-ctx", o.rope_orig_ctx), num("--experts", o.experts), num("--experts-used", o.experts_used);
    if (auto it = flags.find("--seed"); it != flags.end()) {
        char* end = nullptr;
        o.seed = std::strtoull(it->second.c_str(), &end, 10);
        if (!end || *end || it->second.empty()) throw std::invalid_argument("--seed needs an unsigned integer");
        flags.erase(it);
    }
    if (flags.erase("--tied")) o.tied = true;
    for (const char* key : {"--out", "--arch", "--type", "--preset", "--chat-template", "--rope-scaling"})
        if (auto it = flags.find(key); it != flags.end()) {
            if (std::string(key) == "--out") o.out = it->second;
            if (std::string(key) == "--arch") o.arch = it->second;
            if (std::string(key) == "--type") o.type = it->second;
            if (std::string(key) == "--chat-template") o.chat_template = it->second;
            if (std::string(key) == "--rope-scaling") o.rope_scaling = it->second;
            flags.erase(it);
        }
    if (!flags.empty()) throw std::invalid_argument("unknown flag " + flags.begin()->first);
    if (o.out.empty()) throw std::invalid_argument("--out is required");
    static const char* const kArchs[] = {"llama",  "mistral", "qwen2",    "qwen3",    "gemma2",
                                         "gemma3", "phi3",    "qwen2moe", "qwen3moe", "gpt-oss"};
    if (std::none_of(std::begin(kArchs), std::end(kArchs), [&](const char* a) { return o.arch == a; }))
        throw std::invalid_argument("unknown --arch " + o.arch);
    if (o.arch.rfind("gemma", 0) == 0) {
        o.tied = true;
        if (o.sliding_window == 0) o.sliding_window = 4096;
    }
    const bool moe_arch = o.arch == "qwen2moe" || o.arch == "qwen3moe" || o.arch == "gpt-oss";
    if (moe_arch && o.experts == 0) o.experts = 8;
    if (o.experts > 0 && o.experts_used == 0) o.experts_used = std::min(2, o.experts);
    if (o.experts > 0 && o.arch != "llama" && o.arch != "mistral" && !moe_arch)
        throw std::invalid_argument("--experts takes --arch llama, mistral, qwen2moe, qwen3moe or gpt-oss");
    if (o.experts_used > o.experts) throw std::invalid_argument("--experts-used must be at most --experts");
    if (o.arch == "gpt-oss" && o.sliding_window == 0) o.sliding_window = 128;
    if (!o.rope_scaling.empty() && o.rope_scaling != "linear" && o.rope_scaling != "yarn")
        throw std::invalid_argument("--rope-scaling is linear or yarn");
    if (!o.rope_scaling.empty() && !(o.rope_factor > 1))
        throw std::invalid_argument("--rope-scaling needs --rope-factor above 1");
    if (o.rope_scaling == "yarn" && o.rope_orig_ctx == 0)
        o.rope_orig_ctx = std::max(1, static_cast<int>(o.ctx / o.rope_factor));
    if (o.dim % o.heads != 0 || o.heads % o.kv_heads != 0 || (o.dim / o.heads) % 2 != 0)
        throw std::invalid_argument("--dim must be a multiple of --heads (even head size), --heads of --kv-heads");
    if (o.vocab < 260) throw std::invalid_argument("--vocab must be at least 260 (3 special + 256 byte tokens)");
    if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return o;
}

// ---- types ---------------------------------------------------------------------

struct TypeChoice {
    GgmlType matrix;     // every weight matrix
    uint32_t file_type;  // general.file_type (llama_ftype)
    bool k_m = false;    // q4_k_m mixture
};

TypeChoice choose_type(const std::string& t) {
    static const std::map<std::string, TypeChoice> table = {
        {"f32", {GgmlType::F32, 0}},        {"f16", {GgmlType::F16, 1}},
        {"bf16", {GgmlType::BF16, 32}},     {"q8_0", {GgmlType::Q8_0, 7}},
        {"q4_0", {GgmlType::Q4_0, 2}},      {"q4_1", {GgmlType::Q4_1, 3}},
        {"q5_0", {GgmlType::Q5_0, 8}},      {"q5_1", {GgmlType::Q5_1, 9}},
        {"q2_k", {GgmlType::Q2_K, 10}},     {"q3_k", {GgmlType::Q3_K, 11}},
        {"q4_k", {GgmlType::Q4_K, 14}},     {"q5_k", {GgmlType::Q5_K, 16}},
        {"q6_k", {GgmlType::Q6_K, 18}},     {"iq4_nl", {GgmlType::IQ4_NL, 25}},
        {"iq4_xs", {GgmlType::IQ4_XS, 30}}, {"iq2_xxs", {GgmlType::IQ2_XXS, 19}},
        {"iq2_xs", {GgmlType::IQ2_XS, 20}}, {"iq3_xxs", {GgmlType::IQ3_XXS, 23}},
        {"iq1_s", {GgmlType::IQ1_S, 24}},   {"iq3_s", {GgmlType::IQ3_S, 26}},
        {"iq2_s", {GgmlType::IQ2_S, 28}},   {"iq1_m", {GgmlType::IQ1_M, 31}},
        {"mxfp4", {GgmlType::MXFP4, 38}},   {"q4_k_m", {GgmlType::Q4_K, 15, true}}};
    auto it = table.find(t);
    if (it == table.end()) throw std::invalid_argument("unknown --type " + t);
    return it->second;
}

// general.file_type follows llama_ftype: the K types map to their "_S" (pure) ids.
// llama.cpp's fallback for rows that the type's block does not divide.
GgmlType fit_type(GgmlType t, uint64_t row) {
    const uint32_t bs = loom::model::type_traits(static_cast<uint32_t>(t))->block_size;
    if (row % bs == 0) return t;
    GgmlType f = GgmlType::F16;
    switch (t) {
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::IQ4_XS:
        case GgmlType::IQ2_XXS:
        case GgmlType::IQ2_XS:
        case GgmlType::IQ2_S:
        case GgmlType::IQ3_XXS:
        case GgmlType::IQ3_S:
        case GgmlType::IQ1_S:
        case GgmlType::IQ1_M: f = GgmlType::IQ4_NL; break;
        case GgmlType::Q4_K: f = GgmlType::Q5_0; break;
        case GgmlType::Q5_K: f = GgmlType::Q5_1; break;
        case GgmlType::Q6_K: f = GgmlType::Q8_0; break;
        default: break;
    }
    return row % 32 == 0 ? f : GgmlType::F16;
}

// llama.cpp's use_more_bits(i_layer, n_layers).
bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// ---- tensors -------------------------------------------------------------------

enum class Init { Norm, Normal, Output };

struct TensorPlan {
    std::string name;
    std::vector<uint64_t> dims;
    GgmlType type;
    Init init;
    float std;
};

// A mixture's FFN tensors for the layer prefix b (the header comment lists them).
void plan_experts(const Options& o, const TypeChoice& tc, const std::string& b, std::vector<TensorPlan>& t) {
    const uint64_t dim = o.dim, ff = o.ffn, n = o.experts;
    const float router_std = 3.0f / std::sqrt(static_cast<float>(o.dim));
    t.push_back({b + "ffn_gate_inp.weight", {dim, n}, GgmlType::F32, Init::Normal, router_std});
    for (const char* name : {"ffn_gate_exps.weight", "ffn_up_exps.weight"})
        t.push_back({b + name, {dim, ff, n}, fit_type(tc.matrix, dim), Init::Normal, 0.02f});
    t.push_back({b + "ffn_down_exps.weight", {ff, dim, n}, fit_type(tc.matrix, ff), Init::Normal, 0.02f});
    if (o.arch == "gpt-oss") {
        t.push_back({b + "ffn_gate_inp.bias", {n}, GgmlType::F32, Init::Normal, 0.5f});
        t.push_back({b + "ffn_gate_exps.bias", {ff, n}, GgmlType::F32, Init::Normal, 0.02f});
        t.push_back({b + "ffn_up_exps.bias", {ff, n}, GgmlType::F32, Init::Normal, 0.02f});
        t.push_back({b + "ffn_down_exps.bias", {dim, n}, GgmlType::F32, Init::Normal, 0.02f});
    }
    if (o.arch == "qwen2moe") {
        t.push_back({b + "ffn_gate_inp_shexp.weight", {dim}, GgmlType::F32, Init::Normal, router_std});
        for (const char* name : {"ffn_gate_shexp.weight", "ffn_up_shexp.weight"})
            t.push_back({b + name, {dim, ff}, fit_type(tc.matrix, dim), Init::Normal, 0.02f});
        t.push_back({b + "ffn_down_shexp.weight", {ff, dim}, fit_type(tc.matrix, ff), Init::Normal, 0.02f});
    }
}

std::vector<TensorPlan> plan_tensors(const Options& o, const TypeChoice& tc) {
    const uint64_t dim = o.dim, hd = o.dim / o.heads, q = o.heads * hd, kv = o.kv_heads * hd;
    const float out_std = 3.0f / std::sqrt(static_cast<float>(o.dim));
    std::vector<TensorPlan> t;
    auto matrix = [&](std::string name, uint64_t row, uint64_t rows, bool more) {
        const GgmlType ty = more ? GgmlType::Q6_K : tc.matrix;
        t.push_back({std::move(name), {row, rows}, fit_type(ty, row), Init::Normal, 0.02f});
    };
    matrix("token_embd.weight", dim, o.vocab, tc.k_m && o.tied);
    if (o.tied) t.back().init = Init::Output, t.back().std = out_std;
    if (o.arch == "phi3")
        for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"})
            t.push_back({name, {hd / 2}, GgmlType::F32, Init::Norm, 0.2f});
    for (int l = 0; l < o.layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const bool more = tc.k_m && more_bits(l, o.layers);
        const bool gemma = o.arch.rfind("gemma", 0) == 0, phi3 = o.arch == "phi3", oss = o.arch == "gpt-oss";
        t.push_back({b + "attn_norm.weight", {dim}, GgmlType::F32, Init::Norm, 0.02f});
        if (phi3) {
            matrix(b + "attn_qkv.weight", dim, q + 2 * kv, more);
        } else {
            matrix(b + "attn_q.weight", dim, q, false);
            matrix(b + "attn_k.weight", dim, kv, false);
            matrix(b + "attn_v.weight", dim, kv, more);
        }
        if (o.arch == "qwen2" || o.arch == "qwen2moe" || o.arch == "gpt-oss") {
            t.push_back({b + "attn_q.bias", {q}, GgmlType::F32, Init::Normal, 0.02f});
            t.push_back({b + "attn_k.bias", {kv}, GgmlType::F32, Init::Normal, 0.02f});
            t.push_back({b + "attn_v.bias", {kv}, GgmlType::F32, Init::Normal, 0.02f});
        }
        if (o.arch == "qwen3" || o.arch == "qwen3moe" || o.arch == "gemma3") {
            t.push_back({b + "attn_q_norm.weight", {hd}, GgmlType::F32, Init::Norm, 0.02f});
            t.push_back({b + "attn_k_norm.weight", {hd}, GgmlType::F32, Init::Norm, 0.02f});
        }
        matrix(b + "attn_output.weight", q, dim, false);
        if (oss) {
            t.push_back({b + "attn_output.bias", {dim}, GgmlType::F32, Init::Normal, 0.02f});
            t.push_back({b + "attn_sinks.weight", {uint64_t(o.heads)}, GgmlType::F32, Init::Normal, 1.0f});
        }
        if (gemma || oss) t.push_back({b + "post_attention_norm.weight", {dim}, GgmlType::F32, Init::Norm, 0.02f});
        if (!oss) t.push_back({b + "ffn_norm.weight", {dim}, GgmlType::F32, Init::Norm, 0.02f});
        if (o.experts > 0) {
            plan_experts(o, tc, b, t);
            continue;
        }
        if (!phi3) matrix(b + "ffn_gate.weight", dim, o.ffn, false);
        matrix(b + "ffn_up.weight", dim, phi3 ? 2 * uint64_t(o.ffn) : uint64_t(o.ffn), false);
        matrix(b + "ffn_down.weight", o.ffn, dim, more);
        if (gemma) t.push_back({b + "post_ffw_norm.weight", {dim}, GgmlType::F32, Init::Norm, 0.02f});
    }
    t.push_back({"output_norm.weight", {dim}, GgmlType::F32, Init::Norm, 0.02f});
    if (!o.tied) {
        matrix("output.weight", dim, o.vocab, tc.k_m);
        t.back().init = Init::Output, t.back().std = out_std;
    }
    return t;
}

// ---- vocabulary ----------------------------------------------------------------

void add_vocab(loom::model::GgufWriter& w, int n) {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    char buf[8];
    for (int b = 0; b < 256; ++b) {
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        tokens.emplace_back(buf), types.push_back(6);
    }
    const std::string space = "\xE2\x96\x81";  // U+2581
    std::vector<std::string> pieces = {space};
    for (char c = '!'; c <= '~'; ++c) pieces.emplace_back(1, c);
    for (char c = '!'; c <= '~'; ++c) pieces.push_back(space + c);
    // Then lowercase words of growing length, bare and with a leading space.
    std::vector<std::string> words = {""};
    while (static_cast<int>(tokens.size() + pieces.size()) < n) {
        std::vector<std::string> longer;
        for (const auto& wd : words)
            for (char c = 'a'; c <= 'z'; ++c) longer.push_back(wd + c);
        if (longer.front().size() >= 2)
            for (const auto& wd : longer) pieces.push_back(wd), pieces.push_back(space + wd);
        words = std::move(longer);
    }
    std::vector<float> scores(tokens.size(), 0.0f);
    for (size_t i = 0; static_cast<int>(tokens.size()) < n; ++i) {
        tokens.push_back(pieces[i]);
        types.push_back(1);
        scores.push_back(-static_cast<float>(i));
    }
    w.add_llama_vocab(tokens, scores, types);
    w.add_u32("tokenizer.ggml.bos_token_id", 1);
    w.add_u32("tokenizer.ggml.eos_token_id", 2);
    w.add_u32("tokenizer.ggml.unknown_token_id", 0);
    w.add_bool("tokenizer.ggml.add_bos_token", true);
    w.add_bool("tokenizer.ggml.add_eos_token", false);
}

// ---- random numbers --------------------------------------------------------------

uint64_t splitmix(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct Xoshiro {  // xoshiro256+
    uint64_t s[4];
    explicit Xoshiro(uint64_t seed) {
        for (uint64_t& v : s) v = splitmix(seed);
    }
    uint64_t next() {
        const uint64_t r = s[0] + s[3], t = s[1] << 17;
        s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t;
        s[3] = (s[3] << 45) | (s[3] >> 19);
        return r;
    }
};

constexpr int kPoolBits = 20;

// 2^20 standard normal samples (Box-Muller).
std::vector<float> normal_pool(uint64_t seed) {
    std::vector<float> pool(size_t{1} << kPoolBits);
    Xoshiro rng(seed ^ 0x5eedull);
    for (size_t i = 0; i < pool.size(); i += 2) {
        const double u1 = (static_cast<double>(rng.next() >> 11) + 1.0) * 0x1p-53;  // (0, 1]
        const double u2 = static_cast<double>(rng.next() >> 11) * 0x1p-53;
        const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * std::numbers::pi * u2;
        pool[i] = static_cast<float>(r * std::cos(a));
        pool[i + 1] = static_cast<float>(r * std::sin(a));
    }
    return pool;
}

// Fills n values: base + std * N(0, 1) draws from the pool.
void fill(Xoshiro& rng, const std::vector<float>& pool, float base, float std, float* out, int64_t n) {
    constexpr uint64_t mask = (uint64_t{1} << kPoolBits) - 1;
    int64_t i = 0;
    for (; i + 3 <= n; i += 3) {
        const uint64_t r = rng.next();
        out[i] = base + std * pool[r & mask];
        out[i + 1] = base + std * pool[(r >> kPoolBits) & mask];
        out[i + 2] = base + std * pool[(r >> (2 * kPoolBits)) & mask];
    }
    for (; i < n; ++i) out[i] = base + std * pool[rng.next() & mask];
}

// ---- writing ---------------------------------------------------------------------

struct Work {
    size_t tensor;
    uint64_t row0, row1;
};

void write_all(int fd, const uint8_t* p, size_t n, uint64_t off) {
    while (n > 0) {
        const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
        if (w < 0) {
            if (errno == EINTR) continue;
            throw std::system_error(errno, std::generic_category(), "write failed");
        }
        p += w, n -= static_cast<size_t>(w), off += static_cast<uint64_t>(w);
    }
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    TypeChoice tc;
    try {
        o = parse(argc, argv);
        tc = choose_type(o.type);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "loom-make-model: %s\n", e.what());
        usage(stderr);
        return 2;
    }
    if (o.help) {
        usage(stdout);
        return 0;
    }
    std::string chat_template;
    if (!o.chat_template.empty()) {
        std::FILE* f = std::fopen(o.chat_template.c_str(), "rb");
        if (!f) {
            std::perror(("loom-make-model: " + o.chat_template).c_str());
            return 1;
        }
        char buf[65536];
        for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) chat_template.append(buf, n);
        std::fclose(f);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<TensorPlan> plan = plan_tensors(o, tc);

    loom::model::GgufWriter w;
    const std::string a = o.arch;
    w.add_string("general.architecture", a);
    w.add_string("general.name", "loom random " + a + " " + o.type);
    w.add_u32("general.file_type", tc.file_type);
    w.add_u32("general.quantization_version", 2);
    w.add_u32(a + ".block_count", o.layers);
    w.add_u32(a + ".context_length", o.ctx);
    w.add_u32(a + ".embedding_length", o.dim);
    w.add_u32(a + ".feed_forward_length", o.ffn);
    w.add_u32(a + ".attention.head_count", o.heads);
    w.add_u32(a + ".attention.head_count_kv", o.kv_heads);
    w.add_f32(a + ".rope.freq_base", static_cast<float>(o.rope_base));
    w.add_u32(a + ".rope.dimension_count", o.dim / o.heads);
    w.add_f32(a + ".attention.layer_norm_rms_epsilon",
              a.rfind("qwen", 0) == 0 || a.rfind("gemma", 0) == 0 ? 1e-6f : 1e-5f);
    w.add_u32(a + ".vocab_size", o.vocab);
    if (o.sliding_window > 0) w.add_u32(a + ".attention.sliding_window", o.sliding_window);
    if (o.experts > 0) {
        w.add_u32(a + ".expert_count", static_cast<uint32_t>(o.experts));
        w.add_u32(a + ".expert_used_count", static_cast<uint32_t>(o.experts_used));
        w.add_u32(a + ".expert_feed_forward_length", o.ffn);
        if (a == "qwen2moe") w.add_u32(a + ".expert_shared_feed_forward_length", o.ffn);
    }
    if (!o.rope_scaling.empty()) {
        w.add_string(a + ".rope.scaling.type", o.rope_scaling);
        w.add_f32(a + ".rope.scaling.factor", static_cast<float>(o.rope_factor));
        if (o.rope_orig_ctx > 0) w.add_u32(a + ".rope.scaling.original_context_length", o.rope_orig_ctx);
    }
    if (a == "gemma2" || a == "gemma3") {
        w.add_u32(a + ".attention.key_length", o.dim / o.heads);
        w.add_u32(a + ".attention.value_length", o.dim / o.heads);
    }
    if (a == "gemma2") {
        w.add_f32(a + ".attn_logit_softcapping", 50.0f);
        w.add_f32(a + ".final_logit_softcapping", 30.0f);
    }
    if (a == "gemma3") w.add_f32(a + ".rope.freq_base_swa", 10000.0f);
    if (a == "phi3" && o.rope_scaling.empty()) {  // LongRoPE from a quarter of the context
        const int orig = std::max(1, o.ctx / 4);
        w.add_u32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(orig));
        w.add_f32(a + ".rope.scaling.attn_factor",
                  static_cast<float>(std::sqrt(1.0 + std::log(4.0) / std::log(static_cast<double>(orig)))));
    }
    add_vocab(w, o.vocab);
    if (!chat_template.empty()) w.add_string("tokenizer.chat_template", chat_template);
    for (const TensorPlan& t : plan) w.add_tensor_info(t.name, t.dims, static_cast<uint32_t>(t.type));

    // Work items of about 8 MiB of output each, row-aligned.
    std::vector<Work> work;
    int64_t max_row = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
        uint64_t rows = 1;  // every row after the first dim (a mixture's experts are 3-D)
        for (size_t k = 1; k < plan[i].dims.size(); ++k) rows *= plan[i].dims[k];
        const uint64_t row = plan[i].dims[0];
        const uint64_t rb = loom::model::row_bytes(static_cast<uint32_t>(plan[i].type), static_cast<int64_t>(row));
        const uint64_t step = std::max<uint64_t>(1, (8u << 20) / rb);
        for (uint64_t r = 0; r < rows; r += step) work.push_back({i, r, std::min(rows, r + step)});
        max_row = std::max<int64_t>(max_row, static_cast<int64_t>(row));
    }

    const int fd = ::open(o.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        std::perror(("loom-make-model: " + o.out).c_str());
        return 1;
    }
    const std::vector<float> pool = normal_pool(o.seed);
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::string error;
    std::vector<std::thread> threads;
    try {
        if (::ftruncate(fd, static_cast<off_t>(w.file_size())) != 0)
            throw std::system_error(errno, std::generic_category(), "cannot size " + o.out);
        const std::vector<uint8_t> header = w.header();
        write_all(fd, header.data(), header.size(), 0);
        for (int t = 0; t < o.threads; ++t)
            threads.emplace_back([&] {
                try {
                    std::vector<float> vals(static_cast<size_t>(max_row));
                    std::vector<uint8_t> buf;
                    for (size_t k; !failed && (k = next++) < work.size();) {
                        const Work& wk = work[k];
                        const TensorPlan& tp = plan[wk.tensor];
                        const auto n = static_cast<int64_t>(tp.dims[0]);
                        const auto type = static_cast<uint32_t>(tp.type);
                        const uint64_t rb = loom::model::row_bytes(type, n);
                        buf.resize(rb * (wk.row1 - wk.row0));
                        uint64_t s = o.seed * 0x100000001b3ull ^ (wk.tensor << 40) ^ wk.row0;
                        Xoshiro rng(splitmix(s));
                        for (uint64_t r = wk.row0; r < wk.row1; ++r) {
                            fill(rng, pool, tp.init == Init::Norm ? 1.0f : 0.0f, tp.std, vals.data(), n);
                            loom::model::quantize_row(type, vals.data(), buf.data() + (r - wk.row0) * rb, n);
                        }
                        write_all(fd, buf.data(), buf.size(), w.tensor_file_offset(wk.tensor) + wk.row0 * rb);
                    }
                } catch (const std::exception& e) {
                    if (!failed.exchange(true)) error = e.what();
                }
            });
        for (auto& th : threads) th.join();
        if (failed) throw std::runtime_error(error);
        if (::close(fd) != 0) throw std::system_error(errno, std::generic_category(), "cannot close " + o.out);
    } catch (const std::exception& e) {
        for (auto& th : threads)
            if (th.joinable()) th.join();
        std::fprintf(stderr, "loom-make-model: %s\n", e.what());
        return 1;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %s %s, %d layers, dim %d, %zu tensors, %.3f GB in %.2f s (%.2f GB/s, %d threads)\n", o.out.c_str(),
                o.arch.c_str(), o.type.c_str(), o.layers, o.dim, plan.size(), static_cast<double>(w.file_size()) / 1e9,
                secs, static_cast<double>(w.file_size()) / 1e9 / secs, o.threads);
    return 0;
}
