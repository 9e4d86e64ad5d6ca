// Op-table cases for data movement and element-wise ops. Shapes are small but odd (not
// multiples of a warp or a vector width) to exercise kernels' tails; strided copies leave
// gaps random, not poisoned, since the op must leave them as they were. Device shapes add
// rows of 768 (whole 128-bit chunks) and views one element past an allocation (unaligned).
#include "backend_ops_cases.hpp"

namespace tessel::kernels::ops_test {

namespace {
constexpr int kRows = 7, kCols = 45;
constexpr std::int64_t kElements = 1237;

// The device shapes' wide rows: 64 rows of 768 columns.
constexpr int kWideRows = 64, kWideCols = 768;
constexpr std::int64_t kWide = std::int64_t(kWideRows) * kWideCols;

// n elements starting one element into an allocation: no 16-byte alignment. Outputs
// start random (the element before the view is left as it was and compared too).
CRef unaligned_in(OpRun& r, std::int64_t n, float low = -1.0f, float high = 1.0f) {
  return offset(r.in(n + 1, low, high), 1);
}
Ref unaligned_out(OpRun& r, const std::string& label, std::int64_t n) {
  return offset(r.inout(label, n + 1), 1);
}
}  // namespace

void run_fill(OpRun& r) {
  r.backend().fill(r.stream(), r.out("x", kElements), kElements, 0.75f);
  r.backend().fill(r.stream(), r.out("x_f32", kElements, DType::f32), kElements, -2.5f);
}

void run_convert(OpRun& r) {
  const Ref from_f32 = r.random(kElements, DType::f32);
  r.backend().convert(r.stream(), r.out("to_compute", kElements), from_f32, kElements);
  const CRef from_compute = r.in(kElements);
  r.backend().convert(r.stream(), r.out("to_f32", kElements, DType::f32), from_compute, kElements);
}

void run_copy_2d(OpRun& r) {
  constexpr int batch = 3, rows = 5, cols = 11;
  constexpr std::int64_t source_ld = 13, destination_ld = 12, source_stride = 70, destination_stride = 64;
  const CRef source = r.in(source_stride * batch);
  const Ref destination = r.inout("destination", destination_stride * batch);
  r.backend().copy_2d(r.stream(), destination, destination_ld, source, source_ld, rows, cols, batch, destination_stride,
                      source_stride);
}

void run_transpose(OpRun& r) {
  const CRef source = r.in(std::int64_t(kRows) * kCols);
  r.backend().transpose(r.stream(), r.out("transposed", std::int64_t(kRows) * kCols), source, kRows, kCols);
}

void run_add(OpRun& r) {
  const CRef a = r.in(kElements);
  const Ref b = r.random(kElements, DType::f32);
  r.backend().add(r.stream(), r.out("sum", kElements), a, b, kElements);
  // In place: out is a.
  const Ref in_place = r.inout("in_place", kElements);
  r.backend().add(r.stream(), in_place, in_place, r.in(kElements), kElements);
  if (!r.device_shapes()) return;
  r.backend().add(r.stream(), r.out("wide.sum", kWide), r.in(kWide), r.random(kWide, DType::f32), kWide);
  r.backend().add(r.stream(), unaligned_out(r, "unaligned.sum", kElements), unaligned_in(r, kElements),
                  r.in(kElements), kElements);
}

void run_scale(OpRun& r) { r.backend().scale(r.stream(), r.inout("x", kElements), kElements, -0.375f); }

void run_residual(OpRun& r) {
  const std::int64_t n = std::int64_t(kRows) * kCols;
  const CRef x = r.in(n), delta = r.in(n), bias = r.in(kCols);
  r.backend().residual(r.stream(), r.out("with_bias", n), x, delta, bias, kRows, kCols);
  r.backend().residual(r.stream(), r.out("without_bias", n), x, delta, CRef{nullptr, r.compute()}, kRows, kCols);
  if (!r.device_shapes()) return;
  r.backend().residual(r.stream(), r.out("wide.with_bias", kWide), r.in(kWide), r.in(kWide), r.in(kWideCols),
                       kWideRows, kWideCols);
  r.backend().residual(r.stream(), unaligned_out(r, "unaligned.with_bias", kWide), unaligned_in(r, kWide), r.in(kWide),
                       r.in(kWideCols), kWideRows, kWideCols);
}

void run_add_bias(OpRun& r) {
  const Ref y = r.inout("y", std::int64_t(kRows) * kCols);
  r.backend().add_bias(r.stream(), y, r.in(kCols), kRows, kCols);
}

void run_bias_gradient(OpRun& r) {
  const CRef dy = r.in(std::int64_t(kRows) * kCols);
  r.backend().bias_gradient(r.stream(), dy, r.inout_f32("bias_gradient", kCols), kRows, kCols);
}

void run_add_rows(OpRun& r) {
  const RowMap map{1, 2, 5};  // table rows 1 .. 5
  const CRef table = r.in(6 * kCols);
  const Ref x = r.inout("x", std::int64_t(kRows) * kCols);
  r.backend().add_rows(r.stream(), x, table, kRows, kCols, map);
}

void run_add_rows_backward(OpRun& r) {
  const RowMap map{1, 2, 5};
  const CRef dx = r.in(std::int64_t(kRows) * kCols);
  float* table_gradient = r.inout_f32("table_gradient", 6 * kCols);
  r.backend().add_rows_backward(r.stream(), dx, table_gradient, kRows, kCols, map);
}

// Five source rows; each of the kRows output rows sums three of them (index -1 among
// the draws adds nothing), scaled, onto its old value; then the plain gather (k = 1, no
// scale, no accumulation; rows may repeat) into a poisoned output.
void run_gather_sum_rows(OpRun& r) {
  constexpr int kSourceRows = 5, kChoices = 3;
  const CRef source = r.in(std::int64_t(kSourceRows) * kCols);
  const std::int32_t* index = r.tokens(kRows * kChoices, -1, kSourceRows);
  const float* scale = r.in_f32(kRows * kChoices);
  const Ref summed = r.inout("summed", std::int64_t(kRows) * kCols);
  r.backend().gather_sum_rows(r.stream(), summed, source, kSourceRows, index, scale, kRows, kChoices, kCols, true);
  const std::int32_t* rows = r.tokens(kRows, 0, kSourceRows);
  const Ref gathered = r.out("gathered", std::int64_t(kRows) * kCols);
  r.backend().gather_sum_rows(r.stream(), gathered, source, kSourceRows, rows, nullptr, kRows, 1, kCols, false);
}

namespace {
constexpr int kSequences = 2, kSeq = 5, kHeads = 3, kHeadDim = 7;
constexpr std::int64_t kRowsLd = kHeads * kHeadDim + 4;  // a fused QKV row is wider than one part
constexpr std::int64_t kHeadElements = std::int64_t(kSequences) * kSeq * kHeads * kHeadDim;
}  // namespace

void run_rows_to_heads(OpRun& r) {
  const CRef source = r.in(kSequences * kSeq * kRowsLd);
  r.backend().rows_to_heads(r.stream(), source, kRowsLd, r.out("heads", kHeadElements), kSequences, kSeq, kHeads,
                            kHeadDim);
}

void run_heads_to_rows(OpRun& r) {
  const CRef heads = r.in(kHeadElements);
  const Ref destination = r.inout("rows", kSequences * kSeq * kRowsLd);
  r.backend().heads_to_rows(r.stream(), heads, destination, kRowsLd, kSequences, kSeq, kHeads, kHeadDim);
}

void run_gelu_forward(OpRun& r) {
  const CRef x = r.in(kElements, -4.0f, 4.0f);
  r.backend().gelu_forward(r.stream(), x, r.out("y", kElements), kElements);
  if (!r.device_shapes()) return;
  r.backend().gelu_forward(r.stream(), r.in(kWide, -4.0f, 4.0f), r.out("wide.y", kWide), kWide);
  r.backend().gelu_forward(r.stream(), unaligned_in(r, kElements, -4.0f, 4.0f), unaligned_out(r, "unaligned.y", kElements),
                           kElements);
}

void run_gelu_backward(OpRun& r) {
  const CRef x = r.in(kElements, -4.0f, 4.0f), dy = r.in(kElements);
  r.backend().gelu_backward(r.stream(), x, dy, r.out("dx", kElements), kElements);
  if (!r.device_shapes()) return;
  r.backend().gelu_backward(r.stream(), r.in(kWide, -4.0f, 4.0f), r.in(kWide), r.out("wide.dx", kWide), kWide);
  r.backend().gelu_backward(r.stream(), unaligned_in(r, kElements, -4.0f, 4.0f), r.in(kElements),
                            unaligned_out(r, "unaligned.dx", kElements), kElements);
}

// SwiGLU on rows of f = kCols (no whole chunks), and on the device f = 768 (whole
// chunks, 128-bit words) and the same one element off alignment.
void run_swiglu_forward(OpRun& r) {
  const CRef x = r.in(std::int64_t(kRows) * 2 * kCols, -4.0f, 4.0f);
  r.backend().swiglu_forward(r.stream(), x, r.out("y", std::int64_t(kRows) * kCols), kRows, kCols);
  if (!r.device_shapes()) return;
  r.backend().swiglu_forward(r.stream(), r.in(2 * kWide, -4.0f, 4.0f), r.out("wide.y", kWide), kWideRows, kWideCols);
  r.backend().swiglu_forward(r.stream(), unaligned_in(r, 2 * kWide, -4.0f, 4.0f), unaligned_out(r, "unaligned.y", kWide),
                             kWideRows, kWideCols);
}

void run_swiglu_backward(OpRun& r) {
  const CRef x = r.in(std::int64_t(kRows) * 2 * kCols, -4.0f, 4.0f), dy = r.in(std::int64_t(kRows) * kCols);
  r.backend().swiglu_backward(r.stream(), x, dy, r.out("dx", std::int64_t(kRows) * 2 * kCols), kRows, kCols);
  if (!r.device_shapes()) return;
  r.backend().swiglu_backward(r.stream(), r.in(2 * kWide, -4.0f, 4.0f), r.in(kWide), r.out("wide.dx", 2 * kWide),
                              kWideRows, kWideCols);
  r.backend().swiglu_backward(r.stream(), unaligned_in(r, 2 * kWide, -4.0f, 4.0f), r.in(kWide),
                              unaligned_out(r, "unaligned.dx", 2 * kWide), kWideRows, kWideCols);
}

// Positions that start past 0 (a ring block) and an odd row count; the second call turns
// in place.
void run_rope_forward(OpRun& r) {
  constexpr int batch = 3, seq = 5, head_dim = 8;
  constexpr std::int64_t n = std::int64_t(batch) * seq * head_dim;
  r.backend().rope_forward(r.stream(), r.in(n), r.out("y", n), batch, seq, head_dim, 7, 10000.0f);
  const Ref in_place = r.inout("in_place", n);
  r.backend().rope_forward(r.stream(), in_place, in_place, batch, seq, head_dim, 0, 500.0f);
}

void run_rope_backward(OpRun& r) {
  constexpr int batch = 2, seq = 7, head_dim = 6;
  constexpr std::int64_t n = std::int64_t(batch) * seq * head_dim;
  r.backend().rope_backward(r.stream(), r.in(n), r.out("dx", n), batch, seq, head_dim, 3, 10000.0f);
}

}  // namespace tessel::kernels::ops_test
