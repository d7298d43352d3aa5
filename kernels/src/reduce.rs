//! Cube-wide reductions through shared memory, shared by the attention merge, the portable
//! attention kernel and RMSNorm.

use cubecl::prelude::*;

/// The sum of every unit's `value` (`units` units, a power of two): each writes its own into
/// `red[UNIT_POS]`, a tree halves them in place with a sync per level, and every unit gets the
/// total. `red` holds at least `units` entries; it is free again after the caller's next sync.
#[cube]
pub(crate) fn cube_sum(red: &mut Shared<[f32]>, value: f32, #[comptime] units: usize) -> f32 {
    let u = UNIT_POS as usize;
    red[u] = value;
    sync_cube();
    #[unroll]
    for level in 0..comptime!(units.trailing_zeros()) {
        let stride = comptime!(units >> (level + 1));
        if u < stride {
            red[u] += red[u + stride];
        }
        sync_cube();
    }
    red[0]
}

/// [`cube_sum`] with the largest value in place of the sum.
#[cube]
pub(crate) fn cube_max(red: &mut Shared<[f32]>, value: f32, #[comptime] units: usize) -> f32 {
    let u = UNIT_POS as usize;
    red[u] = value;
    sync_cube();
    #[unroll]
    for level in 0..comptime!(units.trailing_zeros()) {
        let stride = comptime!(units >> (level + 1));
        if u < stride {
            let a = red[u];
            let b = red[u + stride];
            red[u] = select(b > a, b, a);
        }
        sync_cube();
    }
    red[0]
}
