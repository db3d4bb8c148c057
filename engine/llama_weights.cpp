// Tensor binding and validation for llama-family models; see llama_weights.hpp.
#include "engine/llama_weights.hpp"

#include "model/gguf/ggml_types.hpp"
#include "model/quant/quant.hpp"

namespace loom::engine {
namespace {

using model::GgufFile;
using model::GgufTensor;
using model::ModelError;

std::string dims_str(const std::vector<uint64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(d[i]);
    }
    return s + "]";
}

const GgufTensor& need(const GgufFile& f, const std::string& name) {
    const GgufTensor* t = f.tensor(name);
    if (!t) throw ModelError("the model has no tensor '" + name + "'");
    return *t;
}

Matrix matrix(const GgufTensor& t, int64_t cols, int64_t rows, const MatrixTypes& types) {
    if (t.dims.size() != 2 || static_cast<int64_t>(t.dims[0]) != cols || static_cast<int64_t>(t.dims[1]) != rows)
        throw ModelError("tensor '" + std::string(t.name) + "' has shape " + dims_str(t.dims) + ", expected [" +
                         std::to_string(cols) + ", " + std::to_string(rows) + "]");
    if (!types.supported(t.type))
        throw ModelError("tensor '" + std::string(t.name) + "' has type " + model::type_name(t.type) + ", which " +
                         types.backend + " does not support");
    Matrix m;
    m.type = t.type;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = static_cast<size_t>(t.nbytes / static_cast<uint64_t>(rows));
    m.data = t.data;
    return m;
}

std::vector<float> vec(const GgufTensor& t, int64_t n) {
    uint64_t total = 1;
    for (uint64_t d : t.dims) total *= d;
    if (static_cast<int64_t>(total) != n || t.dims[0] != total)
        throw ModelError("tensor '" + std::string(t.name) + "' has shape " + dims_str(t.dims) + ", expected [" +
                         std::to_string(n) + "]");
    if (!model::can_dequantize(t.type))
        throw ModelError("tensor '" + std::string(t.name) + "' has unsupported type " + model::type_name(t.type));
    std::vector<float> out(static_cast<size_t>(n));
    model::dequantize_row(t.type, t.data, out.data(), n);
    return out;
}

std::vector<float> opt_vec(const GgufFile& f, const std::string& name, int64_t n) {
    const GgufTensor* t = f.tensor(name);
    return t ? vec(*t, n) : std::vector<float>{};
}

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
    w.tok_embd = matrix(need(f, "token_embd.weight"), d, hp.n_vocab, types);
    if (!model::can_dequantize(w.tok_embd.type))
        throw ModelError("token_embd.weight has type " + model::type_name(w.tok_embd.type) + ", which " +
                         types.backend + " cannot read rows of");
    w.output_norm = vec(need(f, "output_norm.weight"), d);
    w.output = f.tensor("output.weight") ? matrix(need(f, "output.weight"), d, hp.n_vocab, types) : w.tok_embd;
    w.rope_freqs = opt_vec(f, "rope_freqs.weight", hp.rope_dim / 2);

    for (int32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        LayerWeights L;
        L.attn_norm = vec(need(f, p + "attn_norm.weight"), d);
        L.wq = matrix(need(f, p + "attn_q.weight"), d, nq, types);
        L.wk = matrix(need(f, p + "attn_k.weight"), d, nkv, types);
        L.wv = matrix(need(f, p + "attn_v.weight"), d, nkv, types);
        L.wo = matrix(need(f, p + "attn_output.weight"), nq, d, types);
        L.bq = opt_vec(f, p + "attn_q.bias", nq);
        L.bk = opt_vec(f, p + "attn_k.bias", nkv);
        L.bv = opt_vec(f, p + "attn_v.bias", nkv);
        L.q_norm = opt_vec(f, p + "attn_q_norm.weight", hd);
        L.k_norm = opt_vec(f, p + "attn_k_norm.weight", hd);
        if (arch == "qwen3" && (L.q_norm.empty() || L.k_norm.empty()))
            throw ModelError("qwen3 layer " + std::to_string(l) + " lacks attn_q_norm/attn_k_norm");
        L.ffn_norm = vec(need(f, p + "ffn_norm.weight"), d);
        L.gate = matrix(need(f, p + "ffn_gate.weight"), d, hp.n_ff, types);
        L.up = matrix(need(f, p + "ffn_up.weight"), d, hp.n_ff, types);
        L.down = matrix(need(f, p + "ffn_down.weight"), hp.n_ff, d, types);
        w.layers.push_back(std::move(L));
    }
    return w;
}

}  // namespace loom::engine
