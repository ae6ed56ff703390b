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
  extend_attention_cpu(
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
