//! The op on host slices, generic over the storage type: the Flex backend's implementation.
//! Same table and the same f32 arithmetic as the kernel (the table's host twin of the angle);
//! one pass over the batch.

use crate::rope::{RopeFrequencies, RopeStyle};
use half::{bf16, f16};
use rope_pool_kernels::RopePoolGeometry;

/// A float storage type the op reads and writes; arithmetic is done in f32.
pub(crate) trait Storage: Copy + Send + Sync {
    fn to_f32(self) -> f32;
    fn from_f32(value: f32) -> Self;
}

impl Storage for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl Storage for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
}

impl Storage for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
}

/// Rotates every head row of `src` (one token's heads, `head_dim` each) into `dst` with the
/// token's cos/sin (`rotary_dim / 2` each): NeoX halves or GPT-J pairs over the first
/// `rotary_dim` elements, the rest copied.
fn rotate_rows<E: Storage>(
    src: &[E],
    dst: &mut [E],
    head_dim: usize,
    style: RopeStyle,
    cos: &[f32],
    sin: &[f32],
) {
    let half = cos.len();
    for (src, dst) in src
        .chunks_exact(head_dim)
        .zip(dst.chunks_exact_mut(head_dim))
    {
        for i in 0..half {
            let (lo, hi) = match style {
                RopeStyle::Neox => (i, i + half),
                RopeStyle::Gptj => (2 * i, 2 * i + 1),
            };
            let (a, b) = (src[lo].to_f32(), src[hi].to_f32());
            dst[lo] = E::from_f32(a * cos[i] - b * sin[i]);
            dst[hi] = E::from_f32(a * sin[i] + b * cos[i]);
        }
        dst[2 * half..].copy_from_slice(&src[2 * half..]);
    }
}

/// The op on dense row-major slices (`positions`: `[T]`, or `[3, T]` with M-RoPE). Writes all of
/// `q_out`/`k_out`, and the pool rows of the tokens whose slot is in `0..pool_size`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rope_pool<E: Storage>(
    geometry: RopePoolGeometry,
    rope: &RopeFrequencies,
    q: &[E],
    k: &[E],
    v: &[E],
    positions: &[i64],
    slots: &[i64],
    q_out: &mut [E],
    k_out: &mut [E],
    k_pool: &mut [E],
    v_pool: &mut [E],
) {
    let RopePoolGeometry {
        num_tokens,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        pool_size,
        ..
    } = geometry;
    let (q_row, kv_row) = (num_qo_heads * head_dim, num_kv_heads * head_dim);
    let half = rope.table.half();
    // Like the kernel, every position is an i32 (a wider one wraps), the largest one included.
    let max_position = positions
        .iter()
        .map(|&p| p as i32)
        .max()
        .unwrap_or(i32::MIN);
    let long = rope.table.uses_long(max_position as i64);
    let (mut cos, mut sin) = (vec![0f32; half], vec![0f32; half]);
    for (token, &slot) in slots.iter().enumerate() {
        // The kernel reads positions as i32 (wrapping), and so does this twin.
        let row = |r: usize| {
            let at = if rope.rows.is_some() {
                r * num_tokens
            } else {
                0
            } + token;
            positions[at] as i32
        };
        rope.table
            .cos_sin([row(0), row(1), row(2)], long, &mut cos, &mut sin);
        let (qs, ks) = (token * q_row, token * kv_row);
        let style = rope.style;
        let (q_src, q_dst) = (&q[qs..qs + q_row], &mut q_out[qs..qs + q_row]);
        rotate_rows(q_src, q_dst, head_dim, style, &cos, &sin);
        let (k_src, k_dst) = (&k[ks..ks + kv_row], &mut k_out[ks..ks + kv_row]);
        rotate_rows(k_src, k_dst, head_dim, style, &cos, &sin);
        if slot >= 0 && (slot as u64) < pool_size as u64 {
            let ps = slot as usize * kv_row;
            k_pool[ps..ps + kv_row].copy_from_slice(&k_out[ks..ks + kv_row]);
            v_pool[ps..ps + kv_row].copy_from_slice(&v[ks..ks + kv_row]);
        }
    }
}
