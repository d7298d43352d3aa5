//! The op on host slices, generic over the storage type: the Flex backend's implementation.
//! Same table and the same f32 arithmetic as the kernel; one pass over the batch.

use half::{bf16, f16};

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

/// Head geometry of a call: `rows` rows of `heads` heads of `head_dim` elements.
#[derive(Clone, Copy)]
pub(crate) struct Heads {
    pub num_qo_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

/// Rotates every head row of `src` (one token's heads) into `dst` with the token's cos/sin.
fn rotate_rows<E: Storage>(src: &[E], dst: &mut [E], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    for (src, dst) in src
        .chunks_exact(2 * half)
        .zip(dst.chunks_exact_mut(2 * half))
    {
        let (x1, x2) = src.split_at(half);
        let (o1, o2) = dst.split_at_mut(half);
        for i in 0..half {
            let (a, b) = (x1[i].to_f32(), x2[i].to_f32());
            o1[i] = E::from_f32(a * cos[i] - b * sin[i]);
            o2[i] = E::from_f32(a * sin[i] + b * cos[i]);
        }
    }
}

/// The op on dense row-major slices. Writes all of `q_out`/`k_out`, and the pool rows of the
/// tokens whose slot is in `0..pool_size`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rope_pool<E: Storage>(
    heads: Heads,
    turns: &[f32],
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
    let Heads {
        num_qo_heads,
        num_kv_heads,
        head_dim,
    } = heads;
    let (q_row, kv_row) = (num_qo_heads * head_dim, num_kv_heads * head_dim);
    let pool_size = k_pool.len() / kv_row;
    let half = head_dim / 2;
    let (mut cos, mut sin) = (vec![0f32; half], vec![0f32; half]);
    for (token, (&position, &slot)) in positions.iter().zip(slots).enumerate() {
        for i in 0..half {
            let angle = rope_pool_kernels::host_angle(
                position as i32,
                turns[i],
                turns[half + i],
                turns[2 * half + i],
            );
            let (s, c) = angle.sin_cos();
            cos[i] = c;
            sin[i] = s;
        }
        let (qs, ks) = (token * q_row, token * kv_row);
        rotate_rows(&q[qs..qs + q_row], &mut q_out[qs..qs + q_row], &cos, &sin);
        rotate_rows(&k[ks..ks + kv_row], &mut k_out[ks..ks + kv_row], &cos, &sin);
        if slot >= 0 && (slot as u64) < pool_size as u64 {
            let ps = slot as usize * kv_row;
            k_pool[ps..ps + kv_row].copy_from_slice(&k_out[ks..ks + kv_row]);
            v_pool[ps..ps + kv_row].copy_from_slice(&v[ks..ks + kv_row]);
        }
    }
}
