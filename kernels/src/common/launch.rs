//! Launch helpers shared by the rooms.

use cubecl::client::Client;

/// The widest vector, in elements, that `client`'s device loads well for `elem_size`-byte
/// elements and that `fits` accepts (1 when none does).
pub(crate) fn widest_vector(
    client: &Client,
    elem_size: usize,
    fits: impl Fn(usize) -> bool,
) -> usize {
    client
        .io_optimized_vector_sizes(elem_size)
        .find(|&n| n > 0 && fits(n))
        .unwrap_or(1)
}
