// Tensor binding and validation for llama-family models; see llama_weights.hpp.
#include "engine/llama_weights.hpp"

namespace loom::engine {
namespace {

using model::GgufFile;
using model::ModelError;

}  // namespace

LlamaWeights LlamaWeights::bind(const GgufFile& f, const MatrixTypes& types) {
    LlamaWeights w;
    // The architecture first, so that an unknown one is refused by name rather than
    // for a missing `<arch>.*` key.
    const std::string arch = f.get_string("general.architecture");
    if (arch.empty()) throw ModelError("the GGUF has no general.architecture key");
    if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3")
        throw ModelError("unsupported architecture '" + arch + "' (supported: llama, mistral, qwen2, qwen3)");
    w.hp = model::HParams::from_gguf(f);
    const auto& hp = w.hp;
    w.neox_rope = arch == "qwen2" || arch == "qwen3";

    const int64_t d = hp.n_embd, hd = hp.head_dim, nq = int64_t{hp.n_head} * hd, nkv = int64_t{hp.n_head_kv} * hd;
    IoWeights io = IoWeights::bind(f, hp, types);
    w.tok_embd = io.tok_embd;
    w.output_norm = std::move(io.output_norm);
    w.output = io.output;
    w.rope_freqs = bind_optional_vector(f, "rope_freqs.weight", hp.rope_dim / 2);

    for (int32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        LayerWeights L;
        L.attn_norm = bind_vector(need_tensor(f, p + "attn_norm.weight"), d);
        L.wq = bind_matrix(need_tensor(f, p + "attn_q.weight"), d, nq, types);
        L.wk = bind_matrix(need_tensor(f, p + "attn_k.weight"), d, nkv, types);
        L.wv = bind_matrix(need_tensor(f, p + "attn_v.weight"), d, nkv, types);
        L.wo = bind_matrix(need_tensor(f, p + "attn_output.weight"), nq, d, types);
        L.bq = bind_optional_vector(f, p + "attn_q.bias", nq);
        L.bk = bind_optional_vector(f, p + "attn_k.bias", nkv);
        L.bv = bind_optional_vector(f, p + "attn_v.bias", nkv);
        L.q_norm = bind_optional_vector(f, p + "attn_q_norm.weight", hd);
        L.k_norm = bind_optional_vector(f, p + "attn_k_norm.weight", hd);
        if (arch == "qwen3" && (L.q_norm.empty() || L.k_norm.empty()))
            throw ModelError("qwen3 layer " + std::to_string(l) + " lacks attn_q_norm/attn_k_norm");
        L.ffn_norm = bind_vector(need_tensor(f, p + "ffn_norm.weight"), d);
        L.gate = bind_matrix(need_tensor(f, p + "ffn_gate.weight"), d, hp.n_ff, types);
        L.up = bind_matrix(need_tensor(f, p + "ffn_up.weight"), d, hp.n_ff, types);
        L.down = bind_matrix(need_tensor(f, p + "ffn_down.weight"), hp.n_ff, d, types);
        w.layers.push_back(std::move(L));
    }
    return w;
}

}  // namespace loom::engine
