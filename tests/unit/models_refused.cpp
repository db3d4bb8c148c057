// Models the CPU engine cannot run are refused at load time with a message that names
// the reason: an unknown architecture (by name), an unsupported RoPE scaling, a missing
// or misshapen tensor, a weight type without a kernel, a file with no tensors.
#include <catch2/catch.hpp>

#include <functional>

#include "engine/backends/cpu/cpu_backend.hpp"
#include "model/gguf/gguf.hpp"
#include "model/gguf/gguf_writer.hpp"
#include "model/gguf/hparams.hpp"
#include "models_arch.hpp"
#include "test_paths.hpp"

namespace {

// Loads `path` and returns the message of the exception it throws ("" when it loads).
std::string load_error(const std::string& path) {
    try {
        loom::cpu::make_cpu_backend(path, {1, 0});
    } catch (const std::exception& e) { return e.what(); }
    return "";
}

// Rewrites a generated model with `edit` applied to the metadata of a fresh writer:
// the model of `spec` is parsed back and copied key by key and tensor by tensor, with
// `keep` deciding about each key or tensor and `extra` adding to the writer.
std::string rewrite(loom::test::TempDir& dir, const loom::test::ArchSpec& spec,
                    const std::function<bool(std::string_view)>& keep,
                    const std::function<void(loom::model::GgufWriter&)>& extra,
                    const std::function<uint32_t(std::string_view, uint32_t)>& retype = nullptr) {
    using namespace loom::model;
    const std::string src = dir.path + "/src.gguf", dst = dir.path + "/dst.gguf";
    loom::test::write_arch_model(spec, src);
    const auto f = GgufFile::open(src);
    GgufWriter w;
    for (const auto& [key, v] : f.metadata()) {
        if (!keep(key)) continue;
        const std::string k(key);
        switch (v.type) {
            case GgufType::STRING: w.add_string(k, std::string(v.s)); break;
            case GgufType::U32: w.add_u32(k, static_cast<uint32_t>(v.u)); break;
            case GgufType::F32: w.add_f32(k, static_cast<float>(v.f)); break;
            case GgufType::ARRAY:
                if (v.elem_type == GgufType::STRING) {
                    std::vector<std::string> s(v.strings.begin(), v.strings.end());
                    w.add_string_array(k, s);
                } else {
                    w.add_array(k, v.elem_type, v.elems, v.count);
                }
                break;
            default: FAIL("unexpected key type in generated model");
        }
    }
    extra(w);
    for (const auto& t : f.tensors()) {
        if (!keep(t.name)) continue;
        const uint32_t type = retype ? retype(t.name, t.type) : t.type;
        if (type == t.type) {
            w.add_tensor(std::string(t.name), t.dims, t.type, t.data, t.nbytes);
        } else {  // same shape, zero bytes of the new type
            const auto tr = type_traits(type);
            std::vector<uint8_t> zero(t.n_elements() / tr->block_size * tr->type_size);
            w.add_tensor(std::string(t.name), t.dims, type, zero.data(), zero.size());
        }
    }
    w.write_file(dst);
    return dst;
}

const auto kKeepAll = [](std::string_view) { return true; };
const auto kNothing = [](loom::model::GgufWriter&) {};

}  // namespace

TEST_CASE("an unsupported architecture is refused by name") {
    loom::test::TempDir dir;
    loom::test::ArchSpec s;
    s.arch = "falcon";
    loom::test::write_arch_model(s, dir.path + "/m.gguf");
    const std::string msg = load_error(dir.path + "/m.gguf");
    CHECK(msg ==
          "unsupported architecture 'falcon' (supported: llama, mistral, qwen2, qwen3, qwen2moe, qwen3moe, gemma2, "
          "gemma3, phi3, gpt-oss)");
}

TEST_CASE("RoPE scaling other than none/linear/yarn is refused, naming the type") {
    loom::test::TempDir dir;
    const std::string p = rewrite(dir, {}, kKeepAll, [](loom::model::GgufWriter& w) {
        w.add_string("llama.rope.scaling.type", "longrope");
        w.add_f32("llama.rope.scaling.factor", 4.0f);
    });
    const std::string msg = load_error(p);
    INFO(msg);
    CHECK(msg.find("RoPE scaling type 'longrope'") != std::string::npos);
    CHECK(msg.find("not supported") != std::string::npos);

    // YaRN needs the context it extends.
    const std::string y = rewrite(dir, {}, kKeepAll, [](loom::model::GgufWriter& w) {
        w.add_string("llama.rope.scaling.type", "yarn");
        w.add_f32("llama.rope.scaling.factor", 4.0f);
    });
    CHECK(load_error(y) == "llama.rope.scaling.type is yarn but llama.rope.scaling.original_context_length is absent");

    // A type with factor 1 (or none) scales nothing and loads.
    const std::string q = rewrite(dir, {}, kKeepAll, [](loom::model::GgufWriter& w) {
        w.add_string("llama.rope.scaling.type", "yarn");
        w.add_f32("llama.rope.scaling.factor", 1.0f);
    });
    CHECK(load_error(q) == "");
    const auto hp = loom::model::HParams::from_gguf(loom::model::GgufFile::open(q));
    CHECK(hp.rope_scaling == "none");
    CHECK(hp.rope_scale == 1.0f);
}

TEST_CASE("linear RoPE scaling and its legacy key are read like llama.cpp") {
    loom::test::TempDir dir;
    loom::test::ArchSpec s;
    s.linear_scale = 4;
    loom::test::write_arch_model(s, dir.path + "/a.gguf");
    auto hp = loom::model::HParams::from_gguf(loom::model::GgufFile::open(dir.path + "/a.gguf"));
    CHECK(hp.rope_scaling == "linear");
    CHECK(hp.rope_scale == 0.25f);
    s = {};
    s.legacy_scale_key = 2;
    loom::test::write_arch_model(s, dir.path + "/b.gguf");
    hp = loom::model::HParams::from_gguf(loom::model::GgufFile::open(dir.path + "/b.gguf"));
    CHECK(hp.rope_scaling == "linear");
    CHECK(hp.rope_scale == 0.5f);
}

TEST_CASE("a missing tensor is refused by name") {
    loom::test::TempDir dir;
    const std::string p = rewrite(
        dir, {}, [](std::string_view n) { return n != "blk.1.ffn_up.weight"; }, kNothing);
    CHECK(load_error(p) == "the model has no tensor 'blk.1.ffn_up.weight'");
}

TEST_CASE("a missing hyperparameter is refused by key") {
    loom::test::TempDir dir;
    const std::string p = rewrite(
        dir, {}, [](std::string_view n) { return n != "llama.block_count"; }, kNothing);
    CHECK(load_error(p) == "the GGUF lacks the hyperparameter llama.block_count");
}

TEST_CASE("a tensor of the wrong shape is refused with both shapes") {
    loom::test::TempDir dir;
    loom::test::ArchSpec s;
    s.ffn = 128;
    // Hyperparameters say 96, the tensors hold 128.
    const std::string p = rewrite(
        dir, s, [](std::string_view n) { return n != "llama.feed_forward_length"; },
        [](loom::model::GgufWriter& w) { w.add_u32("llama.feed_forward_length", 96); });
    CHECK(load_error(p) == "tensor 'blk.0.ffn_gate.weight' has shape [64, 128], expected [64, 96]");
}

TEST_CASE("a weight type without a CPU kernel is refused, naming tensor and type") {
    loom::test::TempDir dir;
    loom::test::ArchSpec s;
    s.dim = 256;  // a whole 256-element block per row
    const std::string p = rewrite(dir, s, kKeepAll, kNothing, [](std::string_view n, uint32_t t) {
        return n == "blk.0.attn_q.weight" ? static_cast<uint32_t>(loom::model::GgmlType::TQ2_0) : t;
    });
    CHECK(load_error(p) == "tensor 'blk.0.attn_q.weight' has type tq2_0, which the CPU backend does not support");
}

TEST_CASE("a vocabulary-only file is refused: it has no weights") {
    const std::string msg = load_error(loom::test::shared_path("models/vocab/ggml-vocab-llama-spm.gguf"));
    INFO(msg);
    CHECK(msg.find("no tensor 'token_embd.weight'") != std::string::npos);
}

TEST_CASE("a file that is not GGUF is refused with the GGUF reader's message") {
    const std::string msg = load_error(loom::test::shared_path("models/README.md"));
    CHECK(msg.find("bad magic") != std::string::npos);
    CHECK(msg.find("(at offset 0)") != std::string::npos);
}

TEST_CASE("a mixture's expert counts and tensors are checked, naming the key or tensor") {
    loom::test::TempDir dir;
    auto experts = [&](uint32_t n, uint32_t used) {
        return rewrite(dir, {}, kKeepAll, [n, used](loom::model::GgufWriter& w) {
            w.add_u32("llama.expert_count", n);
            if (used > 0) w.add_u32("llama.expert_used_count", used);
        });
    };
    CHECK(load_error(experts(4, 5)) == "llama.expert_used_count 5 exceeds expert_count 4");
    CHECK(load_error(experts(4, 0)) == "the GGUF lacks the hyperparameter llama.expert_used_count");
    // A llama file that declares experts is a mixture: its dense FFN tensors do not stand in.
    CHECK(load_error(experts(4, 2)) == "the model has no tensor 'blk.0.ffn_gate_inp.weight'");
}
