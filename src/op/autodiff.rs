//! The op under Burn's `Autodiff` backend: the forward runs the inner backend's kernel once, and
//! each of the four outputs gets its own backward node. A q/k norm runs first as tracked tensor
//! ops, so its backward (weights included) is Burn's.
//!
//! - `q_rot`, `k_rot`: the gradient flows back through the transposed rotation, which is the
//!   rotation by the negated angle (times the same attention factor). It runs on the inner
//!   backend's own kernel: for a 2×2 rotation `R(θ)` and `S = diag(1, -1)`, `S·R(θ)·S = R(-θ)`,
//!   so the backward flips the sign of each pair's second lane, rotates, and flips it back.
//! - `k_pool`, `v_pool`: the pools are state. A row a valid slot overwrote passes no gradient to
//!   the incoming pool (its old value was discarded); every other row passes its gradient through
//!   unchanged. Token `t` with a valid slot receives the gradient of row `slots[t]` (for `k`,
//!   rotated back like `k_rot`'s); a skipped token (slot `< 0` or `>= pool_size`) receives none
//!   from the pools. With duplicate slots (a caller error) each duplicate receives that row's
//!   gradient. This is what Burn's autodiff of `select_assign` gives the unfused path.

use crate::common::pool_tensor::PoolTensor;
use crate::op::backend::{Outputs, QkNorm, RopePoolBackend, RopePoolInputs};
use crate::op::norm::head_rms_norm;
use crate::op::rope::{RopeFrequencies, RopeStyle};
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, NodeGuard, Ops, OpsKind, binary, unary};
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Autodiff, AutodiffBackend, TensorMetadata, get_or_init_device_settings};
use burn::tensor::{DType, IndexingUpdateOp, Shape, Slice, TensorData};
use std::sync::Arc;

impl<B: RopePoolBackend, C: CheckpointStrategy> RopePoolBackend for Autodiff<B, C> {
    fn rope_pool_fused(
        inputs: RopePoolInputs<Self>,
        rope: Arc<RopeFrequencies>,
        k_rot: bool,
        qk_norm_eps: f32,
    ) -> Outputs<Self> {
        let RopePoolInputs {
            mut q,
            mut k,
            v,
            positions,
            slots,
            k_pool,
            v_pool,
            qk_norm,
        } = inputs;
        // The q/k norm runs as tracked tensor ops here (its gradient is Burn's), the rotation and
        // the pool write on the kernel below.
        if let QkNorm::Rms { q_weight, k_weight } = qk_norm {
            let eps = f64::from(qk_norm_eps);
            q = head_rms_norm::<Self>(q, q_weight, eps);
            k = head_rms_norm::<Self>(k, k_weight, eps);
        }
        let pool_rows = k_pool.stored_shape()[0];
        let k_node = k.node();
        let (q, q_node) = q.into_parts();
        let (k, k_node_pool) = k.into_parts();
        let (v, v_node) = v.into_parts();
        let (k_pool, k_pool_node) = untracked(k_pool);
        let (v_pool, v_pool_node) = untracked(v_pool);
        let (q_rot, k_rot_out, k_pool, v_pool) = B::rope_pool_fused(
            RopePoolInputs {
                q,
                k,
                v,
                positions: positions.clone(),
                slots: slots.clone(),
                k_pool,
                v_pool,
                qk_norm: QkNorm::None,
            },
            rope.clone(),
            k_rot,
            qk_norm_eps,
        );

        let turn = Turn {
            positions,
            rope: rope.clone(),
        };
        let written = Written { slots, pool_rows };
        let rotated =
            |node, output| match RotateBack.prepare::<C>([node]).compute_bound().stateful() {
                OpsKind::Tracked(prep) => prep.finish(turn.clone(), output),
                OpsKind::UnTracked(prep) => prep.finish(output),
            };
        let q_rot = rotated(q_node, q_rot);
        // An empty k_rot (not returned) has nothing to give back.
        let k_rot = if k_rot {
            rotated(k_node, k_rot_out)
        } else {
            drop(k_node);
            <Self as AutodiffBackend>::from_inner(k_rot_out)
        };
        let pool = |nodes, output, turn: Option<Turn<B>>| match PoolBack
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((written.clone(), turn), output),
            OpsKind::UnTracked(prep) => prep.finish(output),
        };
        // fp8 pools are inference state: no gradient flows through them (nor from them to k, v).
        let (k_pool, v_pool) = match (k_pool, v_pool, k_pool_node, v_pool_node) {
            (PoolTensor::Float(kp), PoolTensor::Float(vp), Some(kn), Some(vn)) => (
                PoolTensor::Float(pool([k_node_pool, kn], kp, Some(turn.clone()))),
                PoolTensor::Float(pool([v_node, vn], vp, None)),
            ),
            (k_pool, v_pool, ..) => (tracked(k_pool), tracked(v_pool)),
        };
        (q_rot, k_rot, k_pool, v_pool)
    }
}

/// A pool of the autodiff backend as the inner backend's, and its node (float pools).
fn untracked<B: RopePoolBackend, C: CheckpointStrategy>(
    pool: PoolTensor<Autodiff<B, C>>,
) -> (PoolTensor<B>, Option<NodeGuard>) {
    match pool {
        PoolTensor::Float(t) => {
            let (t, node) = t.into_parts();
            (PoolTensor::Float(t), Some(node))
        }
        PoolTensor::Fp8 { words, scale } => (PoolTensor::Fp8 { words, scale }, None),
    }
}

/// An inner backend's pool as the autodiff backend's, untracked.
fn tracked<B: RopePoolBackend, C: CheckpointStrategy>(
    pool: PoolTensor<B>,
) -> PoolTensor<Autodiff<B, C>> {
    match pool {
        PoolTensor::Float(t) => {
            PoolTensor::Float(<Autodiff<B, C> as AutodiffBackend>::from_inner(t))
        }
        PoolTensor::Fp8 { words, scale } => PoolTensor::Fp8 { words, scale },
    }
}

/// What the backward of a rotation needs: the call's positions and frequencies.
#[derive(Clone, Debug)]
struct Turn<B: RopePoolBackend> {
    positions: IntTensor<B>,
    rope: Arc<RopeFrequencies>,
}

impl<B: RopePoolBackend> Turn<B> {
    /// `grad` (`[T, H, D]`) times the transposed rotation: the rotation by the negated angle, on
    /// the inner backend's kernel (see the module docs).
    fn back(&self, grad: FloatTensor<B>) -> FloatTensor<B> {
        let shape = grad.shape();
        let [tokens, heads, head_dim] = [shape[0], shape[1], shape[2]];
        if tokens * heads * head_dim == 0 {
            return grad;
        }
        let device = grad.device();
        let dtype = grad.dtype();
        let signs = pair_signs::<B>(&self.rope, head_dim, dtype, &device);
        let flipped = B::float_mul(grad, signs.clone());
        // The kernel also rotates a key tensor and writes a pool: one head of the same gradient,
        // a one-row pool, and no valid slot (nothing written) keep that part small.
        let one_head = B::float_slice(
            flipped.clone(),
            &[
                Slice::from(0..tokens),
                Slice::from(0..1),
                Slice::from(0..head_dim),
            ],
        );
        let pool_shape = Shape::new([1, 1, head_dim]);
        let out = B::rope_pool_fused(
            RopePoolInputs {
                q: flipped,
                k: one_head.clone(),
                v: one_head,
                positions: self.positions.clone(),
                slots: B::int_full(
                    Shape::new([tokens]),
                    (-1i64).into(),
                    &device,
                    self.positions.dtype().into(),
                ),
                k_pool: PoolTensor::Float(B::float_zeros(
                    pool_shape.clone(),
                    &device,
                    dtype.into(),
                )),
                v_pool: PoolTensor::Float(B::float_zeros(pool_shape, &device, dtype.into())),
                qk_norm: QkNorm::None,
            },
            self.rope.clone(),
            false,
            0.0,
        );
        B::float_mul(out.0, signs)
    }
}

/// `[1, 1, head_dim]` of ±1: -1 on the second lane of every rotated pair (NeoX: the second half
/// of the rotary dims; GPT-J: the odd ones), 1 elsewhere (the pass-through tail included).
fn pair_signs<B: RopePoolBackend>(
    rope: &RopeFrequencies,
    head_dim: usize,
    dtype: DType,
    device: &B::Device,
) -> FloatTensor<B> {
    let half = rope.inv_freq.len();
    let signs: Vec<f32> = (0..head_dim)
        .map(|i| {
            let second = match rope.style {
                RopeStyle::Neox => (half..2 * half).contains(&i),
                RopeStyle::Gptj => i < 2 * half && i % 2 == 1,
            };
            if second { -1.0 } else { 1.0 }
        })
        .collect();
    let signs = B::float_from_data(TensorData::new(signs, [1, 1, head_dim]), device);
    if dtype == DType::F32 {
        signs
    } else {
        B::float_cast(signs, dtype.into())
    }
}

/// Which pool rows a call wrote: its slots and the pool's row count.
#[derive(Clone, Debug)]
struct Written<B: RopePoolBackend> {
    slots: IntTensor<B>,
    pool_rows: usize,
}

impl<B: RopePoolBackend> Written<B> {
    /// The slots clamped into the pool (a skipped token reads row 0, masked out after) and, as
    /// integers 0/1 of the slots' dtype, whether each token wrote; `None` when the call had no
    /// token or the pool no row (nothing was written). Formed once per backward, for both
    /// parents' gradients.
    fn rows(&self) -> Option<(IntTensor<B>, IntTensor<B>)> {
        if self.pool_rows == 0 || self.slots.shape()[0] == 0 {
            return None;
        }
        let last = self.pool_rows.saturating_sub(1) as i64;
        let dtype = self.slots.dtype();
        let bools = bool_dtype::<B>(&self.slots.device());
        let valid = B::bool_and(
            B::int_greater_equal_elem(self.slots.clone(), 0i64.into(), bools),
            B::int_lower_elem(self.slots.clone(), (self.pool_rows as i64).into(), bools),
        );
        let rows = B::int_clamp(self.slots.clone(), 0i64.into(), last.into());
        Some((rows, B::bool_into_int(valid, dtype.into())))
    }

    /// Each token's share of the pool gradient `grad` (`[P, H, D]`): row `slots[t]` for a token
    /// that wrote, zeros for one that did not; `[T, H, D]`. `rows` is [`Written::rows`].
    fn gather(
        &self,
        grad: FloatTensor<B>,
        rows: Option<(IntTensor<B>, IntTensor<B>)>,
    ) -> FloatTensor<B> {
        let shape = grad.shape();
        let tokens = self.slots.shape()[0];
        let Some((rows, wrote)) = rows else {
            return B::float_zeros(
                Shape::new([tokens, shape[1], shape[2]]),
                &grad.device(),
                grad.dtype().into(),
            );
        };
        let rows_grad = B::float_select(grad, 0, rows);
        let bools = bool_dtype::<B>(&self.slots.device());
        let skipped = B::int_equal_elem(wrote, 0i64.into(), bools);
        let skipped = B::bool_expand(
            B::bool_reshape(skipped, Shape::new([tokens, 1, 1])),
            rows_grad.shape(),
        );
        B::float_mask_fill(rows_grad, skipped, 0.0f64.into())
    }

    /// The pool gradient `grad` with the rows the call overwrote set to zero. `rows` is
    /// [`Written::rows`].
    fn clear(
        &self,
        grad: FloatTensor<B>,
        rows: Option<(IntTensor<B>, IntTensor<B>)>,
    ) -> FloatTensor<B> {
        let Some((rows, wrote)) = rows else {
            return grad;
        };
        let device = grad.device();
        let counts = B::int_select_assign(
            B::int_zeros(Shape::new([self.pool_rows]), &device, wrote.dtype().into()),
            0,
            rows,
            wrote,
            IndexingUpdateOp::Add,
        );
        let overwritten = B::int_greater_elem(counts, 0i64.into(), bool_dtype::<B>(&device));
        let overwritten = B::bool_expand(
            B::bool_reshape(overwritten, Shape::new([self.pool_rows, 1, 1])),
            grad.shape(),
        );
        B::float_mask_fill(grad, overwritten, 0.0f64.into())
    }
}

/// The device's bool storage, as Burn's own autodiff ops pick it.
fn bool_dtype<B: RopePoolBackend>(device: &B::Device) -> burn::tensor::BoolDType {
    get_or_init_device_settings::<B>(device).bool_dtype
}

/// Backward of `q_rot` and `k_rot`.
#[derive(Debug)]
struct RotateBack;

impl<B: RopePoolBackend> Backward<B, 1> for RotateBack {
    type State = Turn<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let turn = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| turn.back(grad));
    }
}

/// Backward of an updated pool, whose parents are the written tensor (`k` rotated, or `v`) and
/// the incoming pool.
#[derive(Debug)]
struct PoolBack;

impl<B: RopePoolBackend> Backward<B, 2> for PoolBack {
    /// The rows written, and for the key pool the rotation its rows went through.
    type State = (Written<B>, Option<Turn<B>>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (written, turn) = ops.state;
        let rows = written.rows();
        let rows_for_pool = rows.clone();
        binary::<B, _, _>(
            ops.parents,
            ops.node,
            grads,
            |grad| {
                let rows = written.gather(grad, rows);
                match &turn {
                    Some(turn) => turn.back(rows),
                    None => rows,
                }
            },
            |grad| written.clear(grad, rows_for_pool),
        );
    }
}
