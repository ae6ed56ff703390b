// sglang 0.5.23's schemas for the two CPU attention ops, over the kernels of the source in
// ../shared/third_party/sglang-kernel-cpu-6127d1da.tar.gz (upstream commit 6127d1da, 2026-08-21).
//
// Why: that source is two months older than 0.5.23's Python, which calls the ops with more
// arguments (srt/layers/attention/intel_amx_backend.py:290-312 and :383-403):
//   decode_attention_cpu(query, k_cache, v_cache, key_scale, value_scale, output, ...)   19 arguments
//   extend_attention_cpu(q, k, v, o, k_buffer, v_buffer, key_scale, value_scale, ..., tree_mask, is_causal)  22
// while the source's schemas (csrc/cpu/torch_extension_cpu.cpp:710-723) take 17 and 19: the KV
// scales (an fp8 KV cache's per-layer scales; `layer.k_scale_float or 1.0`) and `is_causal` (false
// for cross attention and encoder-only layers) are new. build_kernels.py renames the source's two
// registrations to *_6127d1da and this file registers 0.5.23's schemas under the original names.
//
// What it covers: unscaled KV (both scales exactly 1.0, what a bf16 KV cache passes) and
// `is_causal == !is_cross_attn` (the old kernel is causal except for cross attention, which it
// treats as non-causal: extend.cpp:467-480). Anything else is refused with an error naming the
// argument, never computed with the old semantics.
//
// Where the CPU cannot run the source's extend kernel (its bf16 GEMMs are oneDNN brgemm in VNNI
// layout, which torch runs only with AMX: "BFloat16 Brgemm VNNI format is only supported on X64
// when oneDNN ukernel is enabled and `amx` is supported"; `cpublas::could_pack` says which), extend
// attention is computed by `extend_attention_aten` below: the same attention in ATen ops (fp32
// scores and softmax, as the kernel), for the cases the tiny models' Llama path and EAGLE's target
// verify pass (prefix from the cache + new tokens causal, or the QLEN_ONLY tree mask of
// extend.cpp's NOTE 5; a sliding window as extend.cpp:197-204 masks it: a query at position p sees
// keys p - W + 1 .. p), refusing the others by name. Decode attention has no brgemm (decode.cpp) and
// is always the source's. This is what lets SGLang's intel_amx attention backend, the CPU backend
// that has EAGLE (srt/speculative/draft_utils.py:96-112), run on a CPU without AMX.
#include <ATen/native/CPUBlas.h>
#include <torch/all.h>
#include <torch/library.h>

#include <optional>

void decode_attention_cpu(
    at::Tensor& query, at::Tensor& k_cache, at::Tensor& v_cache, at::Tensor& output,
    const std::optional<at::Tensor>& key, const std::optional<at::Tensor>& value, at::Tensor& loc,
    at::Tensor& attn_logits, at::Tensor& req_to_token, at::Tensor& req_pool_indices, at::Tensor& seq_lens,
    double sm_scale, double logit_cap, bool is_cross_attn, int64_t sliding_window_size,
    std::optional<at::Tensor> encoder_lens, std::optional<at::Tensor> sinks);

void extend_attention_cpu(
    at::Tensor& q_extend, const std::optional<at::Tensor>& k_extend, const std::optional<at::Tensor>& v_extend,
    at::Tensor& o_extend, at::Tensor& k_buffer, at::Tensor& v_buffer, at::Tensor& req_to_token,
    at::Tensor& req_pool_indices, at::Tensor& seq_lens, at::Tensor& extend_seq_lens, at::Tensor& extend_start_loc,
    int64_t max_len_extend, double sm_scale, double logit_cap, bool is_cross_attn, int64_t sliding_window_size,
    std::optional<at::Tensor> encoder_lens, std::optional<at::Tensor> sinks, std::optional<at::Tensor> tree_mask);

namespace {

void check_unscaled(const char* op, double key_scale, double value_scale) {
  TORCH_CHECK(
      key_scale == 1.0 && value_scale == 1.0, op, ": key_scale=", key_scale, ", value_scale=", value_scale,
      ": this build's kernels (sglang source 6127d1da) have no scaled (fp8) KV cache; only 1.0 is supported");
}

// extend.cpp's extend_attention_cpu in ATen ops, for a CPU without AMX: each sequence's queries
// attend its cached prefix (req_to_token) in full and its new tokens causally, or as `tree_mask`
// (flat [num_seqs * qlen * qlen] bool, row = query draft token, true = may attend) allows.
void extend_attention_aten(
    at::Tensor& q_extend, const std::optional<at::Tensor>& k_extend, const std::optional<at::Tensor>& v_extend,
    at::Tensor& o_extend, at::Tensor& k_buffer, at::Tensor& v_buffer, at::Tensor& req_to_token,
    at::Tensor& req_pool_indices, at::Tensor& seq_lens, at::Tensor& extend_seq_lens, at::Tensor& extend_start_loc,
    int64_t max_len_extend, double sm_scale, double logit_cap, bool is_cross_attn, int64_t sliding_window_size,
    std::optional<at::Tensor> encoder_lens, std::optional<at::Tensor> sinks, std::optional<at::Tensor> tree_mask) {
  const char* why = "extend_attention_cpu without AMX (this build's ATen path)";
  TORCH_CHECK(k_extend.has_value() && v_extend.has_value(), why, ": no k_extend/v_extend (KV-shared layers) is not supported");
  TORCH_CHECK(!is_cross_attn && !encoder_lens.has_value(), why, ": cross attention is not supported");
  TORCH_CHECK(sliding_window_size <= 0 || !tree_mask.has_value(), why, ": a tree mask with a sliding window is not "
              "supported (nor by extend.cpp:569)");
  TORCH_CHECK(logit_cap == 0.0, why, ": logit_cap=", logit_cap, " is not supported");
  TORCH_CHECK(!sinks.has_value(), why, ": attention sinks are not supported");
  const at::Tensor& k_new = k_extend.value();
  const at::Tensor& v_new = v_extend.value();
  const int64_t num_heads = q_extend.size(1), num_heads_kv = k_new.size(1);
  TORCH_CHECK(k_buffer.size(1) == num_heads_kv, why, ": MLA (a prefix-skipped KV buffer) is not supported");
  TORCH_CHECK(num_heads % num_heads_kv == 0, why, ": ", num_heads, " query heads over ", num_heads_kv, " KV heads");
  const int64_t group = num_heads / num_heads_kv;
  auto seq_lens_cpu = seq_lens.to(at::kLong), ext_lens = extend_seq_lens.to(at::kLong);
  auto starts = extend_start_loc.to(at::kLong), pools = req_pool_indices.to(at::kLong);
  for (int64_t bs = 0; bs < seq_lens.size(0); ++bs) {
    const int64_t seq_len = seq_lens_cpu[bs].item<int64_t>(), ext = ext_lens[bs].item<int64_t>();
    const int64_t prefix = seq_len - ext, start = starts[bs].item<int64_t>();
    TORCH_CHECK(prefix >= 0, why, ": prefix len < 0");
    if (ext == 0) continue;
    auto slots = req_to_token[pools[bs].item<int64_t>()].slice(0, 0, prefix).to(at::kLong);
    auto keys = at::cat({k_buffer.index_select(0, slots), k_new.slice(0, start, start + ext)}, 0).to(at::kFloat);
    auto values = at::cat({v_buffer.index_select(0, slots), v_new.slice(0, start, start + ext)}, 0).to(at::kFloat);
    keys = keys.repeat_interleave(group, 1);      // [seq_len, H, D]
    values = values.repeat_interleave(group, 1);  // [seq_len, H, Dv]
    auto queries = q_extend.slice(0, start, start + ext).to(at::kFloat);  // [ext, H, D]
    auto scores = at::einsum("qhd,khd->hqk", {queries, keys}) * sm_scale;  // [H, ext, seq_len]
    at::Tensor allowed_new;
    if (tree_mask.has_value()) {
      TORCH_CHECK(ext == max_len_extend, why, ": tree_mask needs uniform extend_seq_lens, got ", ext, " vs ", max_len_extend);
      allowed_new = tree_mask.value().view({-1, ext, ext})[bs];
    } else {
      allowed_new = at::ones({ext, ext}, at::kBool).tril();
    }
    auto allowed = at::cat({at::ones({ext, prefix}, at::kBool), allowed_new}, 1);  // [ext, seq_len]
    if (sliding_window_size > 0) {
      auto query_position = at::arange(prefix, seq_len, at::kLong).unsqueeze(1);  // [ext, 1]
      auto key_position = at::arange(seq_len, at::kLong).unsqueeze(0);            // [1, seq_len]
      allowed = allowed.logical_and(key_position.ge(query_position - sliding_window_size + 1));
    }
    scores = scores.masked_fill(allowed.logical_not().unsqueeze(0), -std::numeric_limits<float>::infinity());
    auto out = at::einsum("hqk,khd->qhd", {scores.softmax(-1), values});  // [ext, H, Dv]
    o_extend.slice(0, start, start + ext).copy_(out.to(o_extend.scalar_type()));
  }
}

void decode_attention_0_5_23(
    at::Tensor& query, at::Tensor& k_cache, at::Tensor& v_cache, double key_scale, double value_scale,
    at::Tensor& output, const std::optional<at::Tensor>& key, const std::optional<at::Tensor>& value, at::Tensor& loc,
    at::Tensor& attn_logits, at::Tensor& req_to_token, at::Tensor& req_pool_indices, at::Tensor& seq_lens,
    double sm_scale, double logit_cap, bool is_cross_attn, int64_t sliding_window_size,
    std::optional<at::Tensor> encoder_lens, std::optional<at::Tensor> sinks) {
  check_unscaled("decode_attention_cpu", key_scale, value_scale);
  decode_attention_cpu(
      query, k_cache, v_cache, output, key, value, loc, attn_logits, req_to_token, req_pool_indices, seq_lens,
      sm_scale, logit_cap, is_cross_attn, sliding_window_size, encoder_lens, sinks);
}

void extend_attention_0_5_23(
    at::Tensor& q_extend, const std::optional<at::Tensor>& k_extend, const std::optional<at::Tensor>& v_extend,
    at::Tensor& o_extend, at::Tensor& k_buffer, at::Tensor& v_buffer, double key_scale, double value_scale,
    at::Tensor& req_to_token, at::Tensor& req_pool_indices, at::Tensor& seq_lens, at::Tensor& extend_seq_lens,
    at::Tensor& extend_start_loc, int64_t max_len_extend, double sm_scale, double logit_cap, bool is_cross_attn,
    int64_t sliding_window_size, std::optional<at::Tensor> encoder_lens, std::optional<at::Tensor> sinks,
    std::optional<at::Tensor> tree_mask, bool is_causal) {
  check_unscaled("extend_attention_cpu", key_scale, value_scale);
  TORCH_CHECK(
      is_causal == !is_cross_attn, "extend_attention_cpu: is_causal=", is_causal, " with is_cross_attn=",
      is_cross_attn, ": this build's kernels (sglang source 6127d1da) are causal exactly when not cross attention "
      "(no encoder-only attention)");
  auto attend = at::native::cpublas::could_pack(q_extend.scalar_type()) ? &extend_attention_cpu : &extend_attention_aten;
  attend(
      q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens,
      extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap, is_cross_attn, sliding_window_size,
      encoder_lens, sinks, tree_mask);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  m.def(
      "decode_attention_cpu(Tensor query, Tensor k_cache, Tensor v_cache, float key_scale, float value_scale, "
      "Tensor(a!) output, Tensor? key, Tensor? value, Tensor loc, Tensor attn_logits, Tensor req_to_token, "
      "Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float logit_cap, bool is_cross_attn, "
      "int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()");
  m.impl("decode_attention_cpu", torch::kCPU, &decode_attention_0_5_23);
  m.def(
      "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
      "Tensor k_buffer, Tensor v_buffer, float key_scale, float value_scale, Tensor req_to_token, "
      "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, int max_len_extend, "
      "float sm_scale, float logit_cap, bool is_cross_attn, int sliding_window_size, Tensor? encoder_lens, "
      "Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()");
  m.impl("extend_attention_cpu", torch::kCPU, &extend_attention_0_5_23);
}
