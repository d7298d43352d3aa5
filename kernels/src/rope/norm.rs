//! The fused kernel with a per-head RMSNorm of q and k before the rotation (Qwen3's q/k norm):
//! `x ← w · cast(x · rsqrt(mean(x²) + eps))` over each head row of `head_dim` elements, the sum
//! and the scaling in f32, the normalised row rounded once to the storage type and multiplied by
//! the weight there (transformers' `Qwen3RMSNorm`), then rotated as [`super::kernel`] does.
//! v is written raw.
//!
//! The units are those of the plain kernel — one per (token, head group, pair vector), the
//! pass-through tail included — laid out so that the `units_per_row` units of one (token, head
//! group) are one row of the cube: `CUBE_DIM_X` is that count and each cube holds `CUBE_DIM_Y`
//! such rows. A head's sum of squares is the sum of its units' two vectors, added through shared
//! memory; every unit of a cube therefore walks the same number of head steps (a unit past the
//! batch or its group's last head takes part in the sums and writes nothing).

use super::kernel::{turn, unit_setup, write_kv};
use super::table::RopeVariant;
use cubecl::prelude::*;

/// The sum of squares of a vector's lanes, in f32.
#[cube]
fn squares<F: Float, N: Size>(x: Vector<F, N>) -> f32 {
    let x = Vector::<f32, N>::cast_from(x);
    let mut sum = f32::new(0.0);
    #[unroll]
    for l in 0..N::value() {
        sum += x.extract(l) * x.extract(l);
    }
    sum
}

/// `w · cast(x · scale)`: the normalised vector rounded to `F`, times the weight, rounded again.
#[cube]
fn scaled<F: Float, N: Size>(x: Vector<F, N>, w: Vector<F, N>, scale: f32) -> Vector<F, N> {
    let n = Vector::<F, N>::cast_from(Vector::<f32, N>::cast_from(x) * Vector::new(scale));
    Vector::cast_from(Vector::<f32, N>::cast_from(n) * Vector::<f32, N>::cast_from(w))
}

/// [`rope_pool_kernel`](fn@super::kernel::rope_pool_kernel) with the q/k norm: the same tensors plus `q_weight`,
/// `k_weight` (`[D]`, float `F`, dense) and `eps`. The cube is `(units_per_row, rows)` units
/// (`rows` comptime, the cube's row count); `heads_per_unit` head steps per unit.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn rope_pool_norm_kernel<F: Float, I: Int, P: Numeric, N: Size, M: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    positions: &Tensor<I>,
    slots: &Tensor<I>,
    table: &Tensor<Vector<f32, N>>,
    q_weight: &Tensor<Vector<F, N>>,
    k_weight: &Tensor<Vector<F, N>>,
    q_out: &mut Tensor<Vector<F, N>>,
    k_out: &mut Tensor<Vector<F, N>>,
    k_pool: &mut Tensor<Vector<P, M>>,
    v_pool: &mut Tensor<Vector<P, M>>,
    heads_per_unit: u32,
    rotary_vectors: u32,
    attention_factor: f32,
    long_from: i32,
    k_inv_scale: f32,
    v_inv_scale: f32,
    eps: f32,
    #[comptime] variant: RopeVariant,
    #[comptime] write_k_out: bool,
    #[comptime] strided: bool,
    #[comptime] fp8: bool,
    #[comptime] unit_vectors: usize,
    #[comptime] rows: usize,
    #[define(F, I, P)] _dtypes: [ElemType; 3],
) {
    let num_tokens = q.shape(0);
    let num_qo_heads = q.shape(1);
    let num_kv_heads = k.shape(1);
    let num_heads = num_qo_heads + num_kv_heads;
    let pool_size = k_pool.shape(0);
    let head_dim = q.shape(2);
    let row_vectors = head_dim / q.vector_size();
    let rotary_vectors = rotary_vectors as usize;
    let groups = num_heads.div_ceil(heads_per_unit as usize);

    // No unit leaves early: all of them reach every sync of the head steps.
    let unit_row = CUBE_POS * rows + UNIT_POS_Y as usize;
    let live = unit_row < num_tokens * groups;
    let row = unit_row.min(num_tokens * groups - 1);
    let token = row / groups;
    let group = row % groups;
    let j = UNIT_POS_X as usize;

    let (lo, hi, pass, pool, angles) = unit_setup::<I, N>(
        positions,
        slots,
        table,
        token,
        j,
        (num_tokens, pool_size, rotary_vectors, row_vectors),
        attention_factor,
        long_from,
        variant,
    );
    // `hi == lo` for the last unit of an odd tail: its vector counts once.
    let twice = hi != lo;
    let write = live && pool < pool_size;

    let vector = q.vector_size();
    let (q_base, kv_base) = (
        token * num_qo_heads * row_vectors,
        token * num_kv_heads * row_vectors,
    );
    let (mut q_in, mut k_in, mut v_in) = (q_base, kv_base, kv_base);
    if strided {
        q_in = token * (q.stride(0) / vector);
        k_in = token * (k.stride(0) / vector);
        v_in = token * (v.stride(0) / vector);
    }
    let pool_base = pool * num_kv_heads * row_vectors;
    let inv_dim = f32::new(1.0) / f32::cast_from(head_dim);
    let mut sums = Shared::<[f32]>::new_slice(comptime!(unit_vectors * rows));
    let first = UNIT_POS_Y as usize * unit_vectors;

    for step in 0..heads_per_unit as usize {
        let head = (group + step * groups).min(num_heads - 1);
        let active = live && group + step * groups < num_heads;
        let is_q = head < num_qo_heads;
        let h = head - select(is_q, 0, num_qo_heads);
        let (mut x1, mut x2) = (Vector::<F, N>::new(F::new(0.0)), Vector::new(F::new(0.0)));
        let (mut v1, mut v2) = (x1, x2);
        let w1 = select(is_q, q_weight[lo], k_weight[lo]);
        let w2 = select(is_q, q_weight[hi], k_weight[hi]);
        if is_q {
            let at = q_in + h * row_vectors;
            x1 = q[at + lo];
            x2 = q[at + hi];
        } else {
            let at = k_in + h * row_vectors;
            x1 = k[at + lo];
            x2 = k[at + hi];
            let at = v_in + h * row_vectors;
            v1 = v[at + lo];
            v2 = v[at + hi];
        }
        sums[UNIT_POS as usize] = squares::<F, N>(x1) + select(twice, squares::<F, N>(x2), 0.0);
        sync_cube();
        let mut total = f32::new(0.0);
        for u in 0..unit_vectors {
            total += sums[first + u];
        }
        sync_cube();
        let scale = f32::new(1.0) / f32::sqrt(total * inv_dim + eps);
        let (a, b) = turn::<F, N>(
            scaled::<F, N>(x1, w1, scale),
            scaled::<F, N>(x2, w2, scale),
            angles,
            pass,
            variant,
        );
        if active {
            if is_q {
                let at = q_base + h * row_vectors;
                q_out[at + lo] = Vector::cast_from(a);
                q_out[at + hi] = Vector::cast_from(b);
            } else {
                if write_k_out {
                    let at = kv_base + h * row_vectors;
                    k_out[at + lo] = Vector::cast_from(a);
                    k_out[at + hi] = Vector::cast_from(b);
                }
                if write {
                    let at = pool_base + h * row_vectors;
                    let (v1, v2) = (Vector::cast_from(v1), Vector::cast_from(v2));
                    let values = (a, b, v1, v2);
                    write_kv::<P, N, M>(
                        k_pool,
                        v_pool,
                        at,
                        (lo, hi),
                        values,
                        (k_inv_scale, v_inv_scale),
                        fp8,
                    );
                }
            }
        }
    }
}
