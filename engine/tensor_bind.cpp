// Tensor binding checks shared by every architecture; see tensor_bind.hpp.
#include "engine/tensor_bind.hpp"

#include "model/gguf/ggml_types.hpp"
#include "model/quant/quant.hpp"

namespace loom::engine {
namespace {

std::string dims_str(const std::vector<uint64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(d[i]);
    }
    return s + "]";
}

// Throws unless t's dims are exactly `want`.
void check_dims(const model::GgufTensor& t, const std::vector<int64_t>& want) {
    bool same = t.dims.size() == want.size();
    std::string w = "[";
    for (size_t i = 0; i < want.size(); ++i) {
        same = same && static_cast<int64_t>(t.dims[i]) == want[i];
        w += (i ? ", " : "") + std::to_string(want[i]);
    }
    if (!same)
        throw model::ModelError("tensor '" + std::string(t.name) + "' has shape " + dims_str(t.dims) + ", expected " +
                                w + "]");
}

}  // namespace

const model::GgufTensor& need_tensor(const model::GgufFile& f, const std::string& name) {
    const model::GgufTensor* t = f.tensor(name);
    if (!t) throw model::ModelError("the model has no tensor '" + name + "'");
    return *t;
}

Matrix bind_matrix(const model::GgufTensor& t, int64_t cols, int64_t rows, const MatrixTypes& types) {
    check_dims(t, {cols, rows});
    if (!types.supported(t.type))
        throw model::ModelError("tensor '" + std::string(t.name) + "' has type " + model::type_name(t.type) +
                                ", which " + types.backend + " does not support");
    Matrix m;
    m.type = t.type;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = static_cast<size_t>(t.nbytes / static_cast<uint64_t>(rows));
    m.data = t.data;
    return m;
}

std::vector<Matrix> bind_matrices(const model::GgufTensor& t, int64_t cols, int64_t rows, int64_t n,
                                  const MatrixTypes& types) {
    check_dims(t, {cols, rows, n});
    model::GgufTensor one = t;
    one.dims = {t.dims[0], t.dims[1]};
    one.nbytes = t.nbytes / static_cast<uint64_t>(n);
    std::vector<Matrix> out;
    for (int64_t e = 0; e < n; ++e) {
        out.push_back(bind_matrix(one, cols, rows, types));
        out.back().data = t.data + static_cast<size_t>(e) * one.nbytes;
    }
    return out;
}

std::vector<std::vector<float>> bind_vectors(const model::GgufTensor& t, int64_t m, int64_t n) {
    check_dims(t, {m, n});
    if (!model::can_dequantize(t.type))
        throw model::ModelError("tensor '" + std::string(t.name) + "' has unsupported type " +
                                model::type_name(t.type));
    std::vector<std::vector<float>> out;
    const size_t row = model::row_bytes(t.type, m);
    for (int64_t e = 0; e < n; ++e) {
        out.emplace_back(static_cast<size_t>(m));
        model::dequantize_row(t.type, t.data + static_cast<size_t>(e) * row, out.back().data(), m);
    }
    return out;
}

std::vector<float> bind_vector(const model::GgufTensor& t, int64_t n) {
    uint64_t total = 1;
    for (uint64_t d : t.dims) total *= d;
    if (static_cast<int64_t>(total) != n || t.dims[0] != total)
        throw model::ModelError("tensor '" + std::string(t.name) + "' has shape " + dims_str(t.dims) + ", expected [" +
                                std::to_string(n) + "]");
    if (!model::can_dequantize(t.type))
        throw model::ModelError("tensor '" + std::string(t.name) + "' has unsupported type " +
                                model::type_name(t.type));
    std::vector<float> out(static_cast<size_t>(n));
    model::dequantize_row(t.type, t.data, out.data(), n);
    return out;
}

std::vector<float> bind_optional_vector(const model::GgufFile& f, const std::string& name, int64_t n) {
    const model::GgufTensor* t = f.tensor(name);
    return t ? bind_vector(*t, n) : std::vector<float>{};
}

void bind_attention(const model::GgufFile& f, const std::string& prefix, const model::HParams& hp,
                    const MatrixTypes& types, Matrix& wq, Matrix& wk, Matrix& wv, Matrix& wo) {
    const int64_t d = hp.n_embd, nq = int64_t{hp.n_head} * hp.head_dim, nkv = int64_t{hp.n_head_kv} * hp.head_dim;
    wq = bind_matrix(need_tensor(f, prefix + "attn_q.weight"), d, nq, types);
    wk = bind_matrix(need_tensor(f, prefix + "attn_k.weight"), d, nkv, types);
    wv = bind_matrix(need_tensor(f, prefix + "attn_v.weight"), d, nkv, types);
    wo = bind_matrix(need_tensor(f, prefix + "attn_output.weight"), nq, d, types);
}

Matrix bind_embeddings(const model::GgufFile& f, const model::HParams& hp, const MatrixTypes& types) {
    Matrix m = bind_matrix(need_tensor(f, "token_embd.weight"), hp.n_embd, hp.n_vocab, types);
    if (!model::can_dequantize(m.type))
        throw model::ModelError("token_embd.weight has type " + model::type_name(m.type) + ", which " + types.backend +
                                " cannot read rows of");
    return m;
}

IoWeights IoWeights::bind(const model::GgufFile& f, const model::HParams& hp, const MatrixTypes& types) {
    IoWeights w;
    w.tok_embd = bind_embeddings(f, hp, types);
    w.output_norm = bind_vector(need_tensor(f, "output_norm.weight"), hp.n_embd);
    const model::GgufTensor* out = f.tensor("output.weight");
    w.output = out ? bind_matrix(*out, hp.n_embd, hp.n_vocab, types) : w.tok_embd;
    return w;
}

}  // namespace loom::engine
