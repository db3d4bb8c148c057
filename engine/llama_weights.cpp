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
    const bool qwen_moe = arch == "qwen2moe" || arch == "qwen3moe";
    if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3" && !qwen_moe)
        throw ModelError("unsupported architecture '" + arch +
                         "' (supported: llama, mistral, qwen2, qwen3, qwen2moe, qwen3moe)");
    w.hp = model::HParams::from_gguf(f);
    const auto& hp = w.hp;
    w.neox_rope = arch != "llama" && arch != "mistral";
    if (qwen_moe && hp.n_expert == 0) throw ModelError(arch + " needs " + arch + ".expert_count");
    w.norm_topk = f.get_int(arch + ".expert_weights_norm", arch != "qwen2moe") != 0;
    const int64_t n_ff_shexp = f.get_int(arch + ".expert_shared_feed_forward_length", hp.n_ff);

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
        bind_attention(f, p, hp, types, L.wq, L.wk, L.wv, L.wo);
        L.bq = bind_optional_vector(f, p + "attn_q.bias", nq);
        L.bk = bind_optional_vector(f, p + "attn_k.bias", nkv);
        L.bv = bind_optional_vector(f, p + "attn_v.bias", nkv);
        L.q_norm = bind_optional_vector(f, p + "attn_q_norm.weight", hd);
        L.k_norm = bind_optional_vector(f, p + "attn_k_norm.weight", hd);
        if ((arch == "qwen3" || arch == "qwen3moe") && (L.q_norm.empty() || L.k_norm.empty()))
            throw ModelError(arch + " layer " + std::to_string(l) + " lacks attn_q_norm/attn_k_norm");
        L.ffn_norm = bind_vector(need_tensor(f, p + "ffn_norm.weight"), d);
        if (hp.n_expert == 0) {
            L.gate = bind_matrix(need_tensor(f, p + "ffn_gate.weight"), d, hp.n_ff, types);
            L.up = bind_matrix(need_tensor(f, p + "ffn_up.weight"), d, hp.n_ff, types);
            L.down = bind_matrix(need_tensor(f, p + "ffn_down.weight"), hp.n_ff, d, types);
        } else {
            const int64_t ne = hp.n_expert, ff = hp.n_ff_exp;
            L.gate_inp = bind_matrix(need_tensor(f, p + "ffn_gate_inp.weight"), d, ne, types);
            L.gate_exps = bind_matrices(need_tensor(f, p + "ffn_gate_exps.weight"), d, ff, ne, types);
            L.up_exps = bind_matrices(need_tensor(f, p + "ffn_up_exps.weight"), d, ff, ne, types);
            L.down_exps = bind_matrices(need_tensor(f, p + "ffn_down_exps.weight"), ff, d, ne, types);
        }
        if (arch == "qwen2moe") {
            L.gate_inp_shexp = bind_vector(need_tensor(f, p + "ffn_gate_inp_shexp.weight"), d);
            L.gate_shexp = bind_matrix(need_tensor(f, p + "ffn_gate_shexp.weight"), d, n_ff_shexp, types);
            L.up_shexp = bind_matrix(need_tensor(f, p + "ffn_up_shexp.weight"), d, n_ff_shexp, types);
            L.down_shexp = bind_matrix(need_tensor(f, p + "ffn_down_shexp.weight"), n_ff_shexp, d, types);
        }
        w.layers.push_back(std::move(L));
    }
    return w;
}

}  // namespace loom::engine
