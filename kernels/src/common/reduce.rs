//! Reductions shared by the rooms: the lanes of a vector ([`lane_sum`]: attention, the
//! decoder's products and RMSNorm) and cube-wide sums and maxima through shared memory (the
//! attention merge, the portable attention kernel and RMSNorm).

use cubecl::prelude::*;

/// Sum of the lanes of `x`.
#[cube]
pub(crate) fn lane_sum<N: Size>(x: Vector<f32, N>) -> f32 {
    let mut sum = f32::new(0.0);
    #[unroll]
    for l in 0..N::value() {
        sum += x.extract(l);
    }
    sum
}

/// The sum (or with `max`, the largest) of every unit's `value` (`units` units, a power of two):
/// each writes its own into `red[UNIT_POS]`, a tree halves them in place with a sync per level,
/// and every unit gets the result. `red` holds at least `units` entries; it is free again after
/// the caller's next sync.
#[cube]
fn cube_reduce(
    red: &mut Shared<[f32]>,
    value: f32,
    #[comptime] units: usize,
    #[comptime] max: bool,
) -> f32 {
    let u = UNIT_POS as usize;
    red[u] = value;
    sync_cube();
    #[unroll]
    for level in 0..comptime!(units.trailing_zeros()) {
        let stride = comptime!(units >> (level + 1));
        if u < stride {
            let (a, b) = (red[u], red[u + stride]);
            red[u] = if comptime!(max) {
                select(b > a, b, a)
            } else {
                a + b
            };
        }
        sync_cube();
    }
    red[0]
}

/// The sum of every unit's `value` ([`cube_reduce`]).
#[cube]
pub(crate) fn cube_sum(red: &mut Shared<[f32]>, value: f32, #[comptime] units: usize) -> f32 {
    cube_reduce(red, value, units, false)
}

/// The largest of every unit's `value` ([`cube_reduce`]).
#[cube]
pub(crate) fn cube_max(red: &mut Shared<[f32]>, value: f32, #[comptime] units: usize) -> f32 {
    cube_reduce(red, value, units, true)
}
