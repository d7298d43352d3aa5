//! Host side of the attention kernels: the room's launch knobs ([`AttentionTuning`]), the launch
//! shape (which kernel, vector width, cube size, the split of long contexts) and the launches.

use super::flash::{FlashShape, attention_flash_kernel};
use super::heads::{HEAD_TILE_KEYS, attention_heads_kernel};
use super::plane::attention_plane_kernel;
use super::portable::attention_kernel;
use super::split::attention_merge;
use super::tiles::{KV_PAD, LANES, P_PAD, S_PAD, TILE, attention_tiles_kernel};
use crate::common::fp8::{FP8_VECTOR, Fp8Decode};
use crate::common::launch::{converts_fp8, has_tiles, warp_mma_f16, widest_vector};
use cubecl::client::Client;
use cubecl::features::Plane;
use cubecl::ir::{AddressType, ElemType, FloatKind, UIntKind};
use cubecl::prelude::*;
use cubecl::{CubeDim, calculate_cube_count_elemwise};

/// The attention launch's knobs. `AttentionTuning::default()` is the normal launch (what the H200
/// sweeps of `benches/NOTES.md` chose); the other settings exist for A/B benchmark runs and for
/// tests, and compute the same attention (a different split or kernel adds the f32 sums in
/// another order). Benchmark builds (cargo feature `tuning`) read the fields from `ROPE_POOL_*`
/// environment variables (`AttentionTuning::from_env`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttentionTuning {
    /// The most key tiles a split chunk holds (portable kernel), the fewest iterations (plane
    /// kernel) (`ROPE_POOL_ATTENTION_CHUNK_TILES`; at least 1).
    pub chunk_tiles: Option<usize>,
    /// The most cubes a split aims for (`ROPE_POOL_ATTENTION_CUBES`; at most 1024, the most
    /// chunks the merge takes).
    pub cubes: Option<usize>,
    /// Plane kernel: units per cube (`ROPE_POOL_ATTENTION_UNITS`; rounded up to a power of two,
    /// at least a plane, fewer where shared memory is short).
    pub units: Option<usize>,
    /// Plane kernel: keys per key group per iteration (`ROPE_POOL_ATTENTION_STEPS`; at least 1).
    pub steps: Option<usize>,
    /// Plane kernel: the most units per key (`ROPE_POOL_ATTENTION_LANES`; rounded up to a power
    /// of two, at most the device's smallest plane).
    pub lanes: Option<usize>,
    /// The portable kernel even where planes exist (`ROPE_POOL_ATTENTION_PORTABLE=1`; the root
    /// crate's tests set it to run the portable kernel on every device).
    pub portable: bool,
    /// The query-tile kernel: `Some(true)` for every call it can take (a `head_dim` multiple of
    /// 16, a tile shape that fits shared memory; its tile products on tensor cores for f16 calls
    /// on devices with f16 16 × 16 × 16 tiles and planes of 32, in f32 by the units otherwise:
    /// the root crate's tests run it on every device this way), `Some(false)` never, `None` where
    /// it is the normal launch (f16 calls on such devices whose sequences all have a row tile of
    /// queries or more: prefill; see `AttentionLaunch::tiles_pay`)
    /// (`ROPE_POOL_ATTENTION_TILES=1` / `0`). [`Self::portable`] wins over it.
    pub query_tiles: Option<bool>,
    /// fp8 pools: how their words are decoded; `None`, the normal launch,
    /// [`Fp8Decode::for_device`] (`ROPE_POOL_FP8_DECODE=0` integers, `1` CubeCL's fp8 type, `2`
    /// f16 halves). Devices without f16 always take the integer codec; the head-tile kernel and
    /// the flash form of the query tiles always decode to f16 halves.
    pub fp8_decode: Option<Fp8Decode>,
    /// Plane kernel on fp8 pools: words a load (`ROPE_POOL_ATTENTION_FP8_WORDS`, 1, 2 or 4;
    /// default `PLANE_FP8_WORDS`; fewer where a head row's words are not a multiple).
    pub fp8_words: Option<usize>,
    /// The head-tile kernel (a GQA group's heads as the rows of warp-level tensor-core
    /// products): `None` (the normal launch) or `Some(true)` for every call it can take (f16
    /// queries through CubeCL's CUDA runtime on a device with f16 `mma.sync` 16 × 8 × 16, a head
    /// of 64 or 128, at most 16 q heads a kv head, planes of 32), `Some(false)` never: the plane
    /// kernel instead (`ROPE_POOL_ATTENTION_HEAD_TILES=1` / `0`). The query-tile kernel
    /// (prefill) and [`Self::portable`] win over it.
    pub head_tiles: Option<bool>,
    /// Head-tile kernel: the output accumulators of product rows 8–15 kept for every group
    /// (`ROPE_POOL_ATTENTION_HEADS_FULL=1`). By default they are kept only where the GQA group
    /// has such rows: the same output bits, fewer registers a unit, and 1–4% less time on an
    /// H100 (Llama-3-8B layer, f16 and fp8 pools, 64 × 4096 and 1 × 32768; `benches/RESULTS.md`,
    /// "The head-tile kernel's lean rows").
    pub heads_full_rows: bool,
    /// The query-tile launch on warp-level tensor-core products, scores and running output in
    /// registers (`flash.rs`): `None` (the normal launch) or `Some(true)` wherever the query-tile
    /// kernel runs and it can take the call (f16 queries over f16 or fp8 pools through CubeCL's
    /// CUDA runtime on a device with f16 `mma.sync` 16 × 8 × 16, a head a multiple of 32 up to
    /// 128, planes of 32), `Some(false)` never: the `cmma` query tiles instead
    /// (`ROPE_POOL_ATTENTION_FLASH=1` / `0`).
    pub flash: Option<bool>,
    /// The flash form's warps a cube (`ROPE_POOL_ATTENTION_FLASH_WARPS`; default 4). Its
    /// defaults are, of the one-row-tile shapes, the one measured fastest at 64 prompts of 512
    /// (`benches/NOTES.md`, "Flash-form query tiles"); it is taken only up to 8 warps and
    /// `32 · warps` keys a tile.
    pub flash_warps: Option<usize>,
    /// The flash form's keys a tile (`ROPE_POOL_ATTENTION_FLASH_KEYS`, a multiple of 16;
    /// default 64).
    pub flash_keys: Option<usize>,
    /// Whether the flash form loads each tile's next keys and values before its products
    /// (`ROPE_POOL_ATTENTION_FLASH_AHEAD=1` / `0`; default no).
    pub flash_ahead: Option<bool>,
    /// The flash form's row tiles of 16 a warp (`ROPE_POOL_ATTENTION_FLASH_ROWS`, 1 or 2;
    /// default 1).
    pub flash_rows: Option<usize>,
}

/// The flash kernel's warps a cube. With [`FLASH_KEYS`] and no loads ahead, the fastest shape
/// of one row tile a warp at 64 prompts of 512 on an H100 (1355–1375 µs a Llama-3-8B layer
/// against 1433–1592 with 8 warps, 32 keys or the loads ahead); 8 warps with the loads ahead
/// were the fastest at one 4096-token prompt (833 µs against 903–918; `benches/NOTES.md`,
/// "Flash-form query tiles").
const FLASH_WARPS: usize = 4;
/// The flash kernel's keys a tile (see [`FLASH_WARPS`]).
const FLASH_KEYS: usize = 64;
/// Whether the flash kernel loads the next tile ahead (see [`FLASH_WARPS`]).
const FLASH_AHEAD: bool = false;
/// The flash kernel's row tiles a warp: two, with 32 keys a tile, were 5–11% faster at 64
/// prompts of 512 and 8–16% slower at one of 4096 on an H100 (with 64 keys 2% faster and 16%
/// slower; `benches/NOTES.md`, "Flash-form query tiles").
const FLASH_ROW_TILES: usize = 1;

#[cfg(feature = "tuning")]
impl AttentionTuning {
    /// The settings of the `ROPE_POOL_ATTENTION_*` environment variables, read once per process
    /// (all unset: the defaults). Only in builds with the `tuning` feature: a server never
    /// changes its launch through its environment.
    pub fn from_env() -> Self {
        use crate::common::tuning::{flag, number};
        static TUNING: std::sync::OnceLock<AttentionTuning> = std::sync::OnceLock::new();
        *TUNING.get_or_init(|| AttentionTuning {
            chunk_tiles: number("ROPE_POOL_ATTENTION_CHUNK_TILES"),
            cubes: number("ROPE_POOL_ATTENTION_CUBES"),
            units: number("ROPE_POOL_ATTENTION_UNITS"),
            steps: number("ROPE_POOL_ATTENTION_STEPS"),
            lanes: number("ROPE_POOL_ATTENTION_LANES"),
            portable: flag("ROPE_POOL_ATTENTION_PORTABLE"),
            query_tiles: number::<usize>("ROPE_POOL_ATTENTION_TILES").map(|v| v == 1),
            fp8_decode: crate::common::tuning::fp8_decode(),
            fp8_words: number("ROPE_POOL_ATTENTION_FP8_WORDS").filter(|w| [1, 2, 4].contains(w)),
            head_tiles: number::<usize>("ROPE_POOL_ATTENTION_HEAD_TILES").map(|v| v == 1),
            heads_full_rows: flag("ROPE_POOL_ATTENTION_HEADS_FULL"),
            flash: number::<usize>("ROPE_POOL_ATTENTION_FLASH").map(|v| v == 1),
            flash_warps: number("ROPE_POOL_ATTENTION_FLASH_WARPS"),
            flash_keys: number("ROPE_POOL_ATTENTION_FLASH_KEYS"),
            flash_ahead: number::<usize>("ROPE_POOL_ATTENTION_FLASH_AHEAD").map(|v| v == 1),
            flash_rows: number("ROPE_POOL_ATTENTION_FLASH_ROWS"),
        })
    }
}

/// The sizes of one call (already validated by the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionGeometry {
    /// Query rows (`q.shape[0]`).
    pub num_tokens: usize,
    /// Query heads per row.
    pub num_qo_heads: usize,
    /// Key/value heads per pool row (divides `num_qo_heads`).
    pub num_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Rows of each pool.
    pub pool_size: usize,
    /// The most keys any query sees.
    pub max_keys: usize,
    /// The pools are fp8 words ([`AttentionArgs::fp8_scales`]): rows are decoded in vectors of
    /// four elements, one word each (the plane kernel loads `words` of them at once).
    pub fp8_pools: bool,
    /// The fewest query rows of any sequence of the batch that has queries (each sequence's rows
    /// adjacent; 0 for none): whether a tile of query rows serves one key range.
    pub min_query_rows: usize,
}

/// Which kernel runs a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttentionKernel {
    /// [`attention_plane_kernel`](fn@super::plane::attention_plane_kernel): key groups
    /// of `lanes` units (a plane's slice), `vecs` vectors of a row per unit, `steps` keys per
    /// key group per iteration.
    Plane {
        /// Units per key (a power of two, at most the device's smallest plane).
        lanes: usize,
        /// Vectors of a head row per unit.
        vecs: usize,
        /// Keys each key group loads per iteration.
        steps: usize,
        /// Vectors a load (fp8 pools: words of one vector of the pool; float pools: 1).
        words: usize,
    },
    /// [`attention_kernel`](fn@super::portable::attention_kernel), for devices without plane
    /// operations (or when [`AttentionTuning::portable`] asks for it): one key per unit per tile
    /// of `units` keys.
    Portable,
    /// [`attention_tiles_kernel`](fn@super::tiles::attention_tiles_kernel): tiles of query rows
    /// (16 per plane) over tiles of `block_keys` keys, one cube of `planes` planes per (row tile,
    /// head block), never split.
    Tiles {
        /// Planes per cube (each 16 (row, head) pairs).
        planes: usize,
        /// Keys per key tile (a multiple of 16).
        block_keys: usize,
        /// The tile products on `cmma` tensor-core tiles (else in f32 by the units).
        tensor_cores: bool,
    },
    /// [`attention_flash_kernel`](fn@super::flash::attention_flash_kernel): the query tiles on
    /// warp-level products, never split; its shape (`capped` set at launch).
    Flash(FlashShape),
    /// [`attention_heads_kernel`](fn@super::heads::attention_heads_kernel): one plane per
    /// (query row, kv head, chunk), the kv head's `group` q heads the rows of its products.
    Heads {
        /// q heads per kv head (at most 16).
        group: usize,
        /// Elements (f16 pools) or words (fp8 pools) a pool vector.
        pool_vector: usize,
        /// Rows 8–15's output accumulators kept only where the group has them.
        lean: bool,
    },
}

/// How a call is launched: derived from its geometry, the device and the knobs by
/// [`AttentionLaunch::tuned`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionLaunch {
    /// The kernel and its shape.
    pub(crate) kernel: AttentionKernel,
    /// Elements per vector load.
    pub(crate) vector: usize,
    /// Units per cube.
    pub(crate) units: usize,
    /// Q heads per cube (a divisor of the GQA group).
    pub(crate) heads: usize,
    /// Chunks each query's keys are split into (1: no split, no merge; the caller sizes the split
    /// scratch of [`AttentionArgs`] from it).
    pub chunks: usize,
    /// Keys per chunk (a multiple of the kernel's keys per iteration).
    pub(crate) chunk_keys: usize,
    /// How fp8 pools are decoded ([`AttentionTuning::fp8_decode`]).
    pub(crate) fp8_decode: Fp8Decode,
}

/// Portable kernel: the most cubes a split aims for (more chunks cost the merge more than they
/// gain).
const TARGET_CUBES: usize = 1024;
/// The most chunks a query's keys are split into (the merge holds a weight per chunk in shared
/// memory).
const MAX_CHUNKS: usize = 1024;
/// Units per cube of the merge (one cube per query head), unless a head row has more vectors or
/// the split more chunks than [`MERGE_UNIT_CHUNKS`] a unit.
const MERGE_UNITS: usize = 128;
/// The most chunks whose partial vectors one unit of the merge adds, where the device allows
/// enough units: the adds are a chain of loads, one round trip to memory each (256 chunks over
/// 128 units of a head of 128 took 18.8 µs against the kernel's 51.9 at 1 × 32768 on an H100).
const MERGE_UNIT_CHUNKS: usize = 8;
/// Portable kernel: the fewest cubes a split aims for, two per multiprocessor of a large GPU.
const MIN_CUBES: usize = 256;
/// Portable kernel: the most key tiles a chunk holds while the split can still reach
/// [`MIN_CUBES`]: each cube's fixed cost (its queries' load, the final sums, the merge's read of
/// its partial) is paid over several tiles. The H200 sweep chose 4 and the cube counts above
/// (see benches/NOTES.md, '`pool_attention`: split rule').
const MAX_CHUNK_TILES: usize = 4;
/// Portable kernel: units per cube (keys per tile), unless a head row has more vectors.
const UNITS: usize = 128;
/// Plane kernel: the most cubes a split aims for (512 beat 256 and 1024 on every decode row of
/// the H200 sweep: see benches/NOTES.md, '`pool_attention`'s plane kernel').
const PLANE_TARGET_CUBES: usize = 512;
/// Plane kernel: units per cube.
const PLANE_UNITS: usize = 128;
/// Plane kernel: the fewest iterations (`key groups × steps` keys) a chunk holds. It binds only
/// where a query's keys are few for the cubes the split aims for (one or a few sequences of a
/// few hundred keys: decode at short contexts), and there more, shorter chunks won: batch-1
/// decode at ~550 keys took 158.3–161.6 tok/s with 2 against 154.4–156.5 with 8 through
/// SPIR-V, and 194.8–198.7 against 176.6–178.6 through CUDA (H200; benches/NOTES.md,
/// '`pool_attention`'s plane kernel').
const PLANE_MIN_CHUNK_TILES: usize = 2;
/// Plane kernel: the most vectors a unit holds per head row and kind (q, running values) for
/// all its heads; more heads than this allows are split over cubes.
const PLANE_REGISTER_VECTORS: usize = 16;
/// Plane kernel: the most loads of keys (and as many of values) a unit issues per iteration,
/// over its steps (4 beat 8 and 16 in the H200 sweep: see benches/NOTES.md, '`pool_attention`'s
/// plane kernel').
const PLANE_LOADS: usize = 4;
/// Plane kernel on float pools: the most key elements a unit holds per iteration, widened to
/// f32 (and as many of values), over its steps: 16, what `PLANE_LOADS` loads held in the H200
/// sweep through SPIR-V, whose vectors hold at most 4 elements. Through CUDA (vectors of 8
/// halves) 2 keys a step beat 4: batch-64 decode 6301 against 5480 tok/s on the H200.
const PLANE_KEY_ELEMENTS: usize = 16;
/// Plane kernel: the most units per key.
const PLANE_LANES: usize = 16;
/// Plane kernel on fp8 pools: words (of four codes) a unit loads at once. Two beat one by 4–8% on
/// four decode rows of the H200 and lost 14% at 1 × 4096 (benches/NOTES.md, 'fp8 codec').
const PLANE_FP8_WORDS: usize = 2;

/// Plane kernel: keys a key group reads an iteration, for a unit's `loads` loads of `vecs`
/// vectors of `vector` elements a key row: [`PLANE_LOADS`] loads, and on float pools at most
/// [`PLANE_KEY_ELEMENTS`] elements (at least one key).
fn plane_steps(fp8_pools: bool, loads: usize, vecs: usize, vector: usize) -> usize {
    let steps = match fp8_pools {
        true => PLANE_LOADS / loads,
        false => (PLANE_LOADS / loads).min(PLANE_KEY_ELEMENTS / (vecs * vector)),
    };
    steps.max(1)
}

/// The chunks a query's `tiles` key tiles are split into where `work` cubes (query rows × head
/// blocks) fall short of `target`: enough for `target` cubes, each chunk at least `min_tiles`
/// tiles, at most [`MAX_CHUNKS`]; else one.
fn split_chunks(tiles: usize, work: usize, target: usize, min_tiles: usize) -> usize {
    match work < target {
        true => target
            .div_ceil(work)
            .min(tiles.div_ceil(min_tiles))
            .clamp(1, MAX_CHUNKS),
        false => 1,
    }
}

/// `(chunks, keys a chunk)` of `keys` keys split into about `chunks` chunks of whole `tile`s
/// (rounding the chunks up to tiles can leave fewer of them).
fn chunk_keys(keys: usize, chunks: usize, tile: usize) -> (usize, usize) {
    let chunk_keys = keys.div_ceil(chunks).div_ceil(tile) * tile;
    (keys.div_ceil(chunk_keys), chunk_keys)
}

/// Units per cube of the merge of `chunks` partials of `row_vectors` vectors of `vector` f32 a
/// head: a power of two, at least [`MERGE_UNITS`] and `row_vectors`, more where a unit would
/// otherwise add more than [`MERGE_UNIT_CHUNKS`] chunks, as long as the device allows the units
/// (`max_units`) and their shared memory (`max_shared` bytes: a sum and a vector a unit, a
/// weight a chunk).
fn merge_units(
    row_vectors: usize,
    chunks: usize,
    vector: usize,
    max_units: usize,
    max_shared: usize,
) -> usize {
    let least = row_vectors.next_power_of_two().max(MERGE_UNITS);
    let shared = |units: usize| 4 * (units * (1 + vector) + chunks.next_power_of_two());
    let mut units = (row_vectors * chunks.div_ceil(MERGE_UNIT_CHUNKS)).next_power_of_two();
    units = units.min(match max_units {
        0 => 0,
        n => 1 << n.ilog2(),
    });
    while units > least && shared(units) > max_shared {
        units /= 2;
    }
    least.max(units)
}

/// The largest divisor of `group` that `fits` accepts (1 when none does).
fn largest_divisor(group: usize, fits: impl Fn(usize) -> bool) -> usize {
    (1..=group)
        .rev()
        .find(|&h| group.is_multiple_of(h) && fits(h))
        .unwrap_or(1)
}

/// The q heads of a GQA group of `group` that one row tile of `units` planes (or warps) of the
/// query-tile kernels takes together: the most that divide both (the tile's rows are then
/// `units / heads` of 16).
fn tile_heads(group: usize, units: usize) -> usize {
    largest_divisor(group, |h| units.is_multiple_of(h))
}

impl AttentionLaunch {
    /// The launch of `geometry` for queries of `float` on `client`'s device, with `tuning`'s
    /// overrides ([`AttentionTuning::default`] in normal use: the query-tile kernel for f16
    /// prefill where the device has f16 tensor-core tiles — in its flash form where it takes the
    /// call (see [`AttentionTuning::flash`]) — else the head-tile kernel for f16
    /// queries through CUDA (see [`AttentionTuning::head_tiles`]), else the plane kernel where
    /// the device has plane operations, the portable one elsewhere).
    pub fn tuned(
        client: &Client,
        float: ElemType,
        geometry: AttentionGeometry,
        tuning: &AttentionTuning,
    ) -> Self {
        let elem_size = float.size();
        let fp8_decode = tuning
            .fp8_decode
            .unwrap_or_else(|| Fp8Decode::for_device(client))
            .on_device(client);
        let d = geometry.head_dim.max(1);
        let vector = match geometry.fp8_pools {
            true => FP8_VECTOR,
            false => widest_vector(client, elem_size, |n| d.is_multiple_of(n)),
        };
        let row_vectors = d / vector;
        let group = (geometry.num_qo_heads / geometry.num_kv_heads.max(1)).max(1);
        let properties = client.properties();
        let shared = properties.hardware.max_shared_memory_size;
        let plane_size = properties.hardware.plane_size_min as usize;
        let vector_bytes = vector * 4;
        if let Some(launch) = Self::tiles(client, float, geometry, tuning, vector, fp8_decode) {
            return launch;
        }
        if let Some(launch) = Self::heads(client, float, geometry, tuning, fp8_decode) {
            return launch;
        }
        let plane = properties.features.plane.contains(Plane::Ops)
            && plane_size.is_power_of_two()
            && !tuning.portable;
        let default_target = if plane {
            PLANE_TARGET_CUBES
        } else {
            TARGET_CUBES
        };
        let target = tuning.cubes.unwrap_or(default_target).min(MAX_CHUNKS);
        let keys = geometry.max_keys.max(1);
        let rows = geometry.num_tokens * geometry.num_kv_heads;
        // The kernel, its cube, the q heads per cube, the keys per iteration (a chunk holds a
        // whole number of them) and the chunks each query's keys are split into.
        let (kernel, units, heads, tile, chunks) = if plane {
            let max_lanes = tuning.lanes.unwrap_or(PLANE_LANES);
            // fp8 words of a row are loaded `words` at a time (one vector of the pool).
            let words = match geometry.fp8_pools {
                true => [4, 2, 1]
                    .into_iter()
                    .filter(|&w| w <= tuning.fp8_words.unwrap_or(PLANE_FP8_WORDS))
                    .find(|&w| row_vectors.is_multiple_of(w))
                    .unwrap_or(1),
                false => 1,
            };
            let row_loads = row_vectors / words;
            let lanes = row_loads
                .next_power_of_two()
                .min(plane_size)
                .min(max_lanes.max(1).next_power_of_two());
            let loads = row_loads.div_ceil(lanes);
            let vecs = loads * words;
            let steps = tuning
                .steps
                .unwrap_or_else(|| plane_steps(geometry.fp8_pools, loads, vecs, vector))
                .max(1);
            let heads = largest_divisor(group, |h| h <= PLANE_REGISTER_VECTORS / vecs);
            // Whole planes (a key group never straddles two, and no plane is partial): a power
            // of two, at least one plane. The final merge holds every unit's vectors of one head
            // row in shared memory.
            let plane_units = plane_size.max(lanes);
            let mut units = tuning
                .units
                .unwrap_or(PLANE_UNITS)
                .next_power_of_two()
                .max(plane_units);
            while units > plane_units
                && units * vecs * vector_bytes + 8 * units * heads > shared / 2
            {
                units /= 2;
            }
            let tile = units / lanes * steps;
            let min_tiles = tuning.chunk_tiles.unwrap_or(PLANE_MIN_CHUNK_TILES).max(1);
            let work = (rows * (group / heads)).max(1);
            let chunks = split_chunks(keys.div_ceil(tile), work, target, min_tiles);
            let kernel = AttentionKernel::Plane {
                lanes,
                vecs,
                steps,
                words,
            };
            (kernel, units, heads, tile, chunks)
        } else {
            let units = row_vectors.next_power_of_two().max(UNITS);
            // Shared memory: the block's queries, two score rows per head, the tile's rows and
            // the units' value vectors.
            let bytes = |heads: usize| {
                heads * row_vectors * vector_bytes
                    + 8 * heads * units
                    + 4 * units
                    + units * vector_bytes
            };
            let heads = largest_divisor(group, |h| bytes(h) <= shared / 2);
            let work = (rows * (group / heads)).max(1);
            let max_tiles = tuning.chunk_tiles.unwrap_or(MAX_CHUNK_TILES).max(1);
            let tiles = keys.div_ceil(units);
            let mut chunks = 1;
            if work < target && tiles > 1 {
                // As many tiles per chunk as still leave MIN_CUBES cubes, at most `max_tiles`.
                let chunk_tiles = (tiles / MIN_CUBES.div_ceil(work)).clamp(1, max_tiles);
                chunks = tiles.div_ceil(chunk_tiles).min(target.div_ceil(work));
            }
            (AttentionKernel::Portable, units, heads, units, chunks)
        };
        let (chunks, chunk_keys) = chunk_keys(keys, chunks, tile);
        Self {
            kernel,
            vector,
            units,
            heads,
            chunks,
            chunk_keys,
            fp8_decode,
        }
    }
}

/// Query-tile kernel: the (planes, keys per key tile) tried in turn, the first whose shared memory
/// fits the device.
const TILE_SHAPES: [(usize, usize); 4] = [(4, 32), (2, 32), (2, 16), (1, 16)];
/// Query-tile kernel, normal launch: the largest head (its queries and running output stay in
/// registers as fragments: 128 values a unit at 128).
const TILES_MAX_HEAD_DIM: usize = 128;
/// Query-tile kernel, normal launch: the fewest cubes (row tile, head block), about one per
/// multiprocessor of a large GPU: it has no split of long contexts (not measured: a guard against
/// a few long walks, such as a short chunk over a long prefix).
const TILES_MIN_CUBES: usize = 128;

impl AttentionLaunch {
    /// The query rows a row tile of the query-tile kernels holds in their normal launch, for
    /// `group` q heads a kv head: a sequence with fewer queries shares its tiles with others, so
    /// a call with one takes the other kernels. 16 for groups of 4 or 8, 32 for groups of 2 or
    /// 6, 64 without a group: the first tile shape's planes and the flash form's warps (4 each)
    /// split over the group's heads.
    pub fn query_tile_rows(group: usize) -> usize {
        const { assert!(TILE_SHAPES[0].0 == FLASH_WARPS && FLASH_ROW_TILES == 1) };
        let planes = TILE_SHAPES[0].0;
        planes / tile_heads(group.max(1), planes) * TILE
    }

    /// Whether the query-tile kernel is the normal launch of `geometry` on a device with
    /// tensor-core tiles, for tiles of `tile_rows` query rows and `head_blocks` cubes per kv head
    /// and row tile: every sequence with queries has a tile's worth of rows, so no tile walks the
    /// keys of many sequences (the crate's `pool_attention` launches a step that mixes a prompt
    /// with decoding sequences as one launch a run of each kind); a head of at most
    /// [`TILES_MAX_HEAD_DIM`]; and [`TILES_MIN_CUBES`] cubes or more.
    fn tiles_pay(geometry: AttentionGeometry, tile_rows: usize, head_blocks: usize) -> bool {
        geometry.min_query_rows >= tile_rows
            && geometry.head_dim <= TILES_MAX_HEAD_DIM
            && geometry.num_tokens.div_ceil(tile_rows.max(1)) * geometry.num_kv_heads * head_blocks
                >= TILES_MIN_CUBES
    }

    /// The query-tile launch of `geometry` (see [`AttentionTuning::query_tiles`]), or `None`
    /// when it is not the call's kernel: not asked for and not the normal launch, a head that is
    /// not a whole number of 16-element tiles, or no tile shape whose shared memory fits.
    fn tiles(
        client: &Client,
        float: ElemType,
        geometry: AttentionGeometry,
        tuning: &AttentionTuning,
        vector: usize,
        fp8_decode: Fp8Decode,
    ) -> Option<Self> {
        let d = geometry.head_dim;
        if tuning.portable || tuning.query_tiles == Some(false) || d == 0 || !d.is_multiple_of(TILE)
        {
            return None;
        }
        let properties = client.properties();
        let hardware = &properties.hardware;
        let tensor_cores = float == ElemType::Float(FloatKind::F16)
            && hardware.plane_size_min as usize == LANES
            && hardware.plane_size_max as usize == LANES
            && hardware.max_units_per_cube as usize >= LANES * TILE_SHAPES[0].0
            && has_tiles(client, float, [TILE as u32; 3]);
        let elem = float.size();
        // Key and value tiles, per plane the scores and weights (rows padded as the kernel
        // pads them), the keys' pool rows, three
        // words per unit (range bounds, pair sums), per row a factor, the rescale flag.
        let bytes = |planes: usize, keys: usize| {
            2 * keys * (d + KV_PAD) * elem
                + planes * TILE * ((keys + S_PAD) * 4 + (keys + P_PAD) * elem)
                + 4 * keys
                + 12 * LANES * planes
                + 4 * TILE * planes
                + 4
        };
        let shared = hardware.max_shared_memory_size;
        let (planes, block_keys) = TILE_SHAPES.into_iter().find(|&(planes, keys)| {
            bytes(planes, keys) <= shared
                && LANES * planes <= hardware.max_units_per_cube as usize
                && (!tensor_cores || TILE * planes <= 2 * keys)
        })?;
        let group = (geometry.num_qo_heads / geometry.num_kv_heads.max(1)).max(1);
        if let Some(launch) = Self::flash(
            client,
            float,
            geometry,
            tuning,
            vector,
            fp8_decode,
            tensor_cores,
        ) {
            return Some(launch);
        }
        let heads = tile_heads(group, planes);
        let tile_rows = planes / heads * TILE;
        if tuning.query_tiles != Some(true)
            && !(tensor_cores && Self::tiles_pay(geometry, tile_rows, group / heads))
        {
            return None;
        }
        Some(Self {
            kernel: AttentionKernel::Tiles {
                planes,
                block_keys,
                tensor_cores,
            },
            vector,
            units: LANES * planes,
            heads,
            chunks: 1,
            chunk_keys: geometry.max_keys.max(1),
            fp8_decode,
        })
    }
}

impl AttentionLaunch {
    /// The flash launch of `geometry` (see [`AttentionTuning::flash`]) where the query-tile
    /// kernel would run (asked for, or its normal launch on a device with `cmma` tiles:
    /// `tensor_cores`) and the flash kernel takes the call, else `None`.
    fn flash(
        client: &Client,
        float: ElemType,
        geometry: AttentionGeometry,
        tuning: &AttentionTuning,
        vector: usize,
        fp8_decode: Fp8Decode,
        tensor_cores: bool,
    ) -> Option<Self> {
        let d = geometry.head_dim;
        let warps = tuning.flash_warps.unwrap_or(FLASH_WARPS);
        let block_keys = tuning.flash_keys.unwrap_or(FLASH_KEYS);
        let ahead = tuning.flash_ahead.unwrap_or(FLASH_AHEAD);
        let row_tiles = tuning.flash_rows.unwrap_or(FLASH_ROW_TILES);
        let hardware = &client.properties().hardware;
        // Each unit writes at most one pool row of a tile; past 8 warps a cube the registers a
        // unit (231–255 measured) pass what a cube may hold.
        let takes = tuning.flash != Some(false)
            && (1..=8).contains(&warps)
            && block_keys <= LANES * warps
            && float == ElemType::Float(FloatKind::F16)
            && vector == if geometry.fp8_pools { FP8_VECTOR } else { 8 }
            && d.is_multiple_of(32)
            && (32..=128).contains(&d)
            && block_keys.is_multiple_of(16)
            && block_keys > 0
            && (1..=2).contains(&row_tiles)
            && warp_mma_f16(client)
            && LANES * warps <= hardware.max_units_per_cube as usize;
        if !takes {
            return None;
        }
        let group = (geometry.num_qo_heads / geometry.num_kv_heads.max(1)).max(1);
        let heads = tile_heads(group, warps);
        let shape = FlashShape {
            warps,
            heads,
            block_keys,
            head_dim: d,
            capped: false,
            ahead,
            row_tiles,
            fp8: geometry.fp8_pools,
        };
        if shape.shared_bytes() > hardware.max_shared_memory_size
            || (tuning.query_tiles != Some(true)
                && !(tensor_cores && Self::tiles_pay(geometry, shape.tile_rows(), group / heads)))
        {
            return None;
        }
        Some(Self {
            kernel: AttentionKernel::Flash(shape),
            vector,
            units: LANES * warps,
            heads,
            chunks: 1,
            chunk_keys: geometry.max_keys.max(1),
            fp8_decode,
        })
    }
}

/// Head-tile kernel: the cubes (one plane each) a split aims for. On an H100 (141–146 registers a
/// unit then, allocated in steps of 8, left 13 or 14 planes a multiprocessor: 1716–1848 on the
/// GPU; with the two parts, 148 on fp8 pools and 168 on f16 ones, 13 and 12 planes),
/// 64 rows over 4096 keys took 251 µs on fp8 pools and 397 µs on f16 ones with 1536, against
/// 319 / 447 with 1024 and 338 / 488 with 2048 (Nsight Compute, the kernel before its weights'
/// two f16 parts; `benches/RESULTS.md`, "The head-tile attention kernel").
const HEADS_TARGET_CUBES: usize = 1536;
/// Head-tile kernel: the fewest key tiles a chunk holds.
const HEADS_MIN_CHUNK_TILES: usize = 4;

impl AttentionLaunch {
    /// The head-tile launch of `geometry` where the device and call allow it and
    /// [`AttentionTuning::head_tiles`] does not refuse it (see there), else `None`.
    fn heads(
        client: &Client,
        float: ElemType,
        geometry: AttentionGeometry,
        tuning: &AttentionTuning,
        fp8_decode: Fp8Decode,
    ) -> Option<Self> {
        let d = geometry.head_dim;
        let kv = geometry.num_kv_heads.max(1);
        let group = geometry.num_qo_heads / kv;
        let f16 = ElemType::Float(FloatKind::F16);
        let takes = tuning.head_tiles != Some(false)
            && !tuning.portable
            && float == f16
            && warp_mma_f16(client)
            && (d == 64 || d == 128)
            && (1..=16).contains(&group)
            && geometry.num_qo_heads == group * kv;
        if !takes {
            return None;
        }
        let keys = geometry.max_keys.max(1);
        let work = (geometry.num_tokens * kv).max(1);
        let target = tuning.cubes.unwrap_or(HEADS_TARGET_CUBES);
        let min_tiles = tuning.chunk_tiles.unwrap_or(HEADS_MIN_CHUNK_TILES).max(1);
        let chunks = split_chunks(keys.div_ceil(HEAD_TILE_KEYS), work, target, min_tiles);
        let (chunks, chunk_keys) = chunk_keys(keys, chunks, HEAD_TILE_KEYS);
        let pool_vector = match geometry.fp8_pools {
            true => (d / 32).min(4),
            false => 8,
        };
        Some(Self {
            kernel: AttentionKernel::Heads {
                group,
                pool_vector,
                lean: !tuning.heads_full_rows,
            },
            vector: FP8_VECTOR,
            units: LANES,
            heads: group,
            chunks,
            chunk_keys,
            fp8_decode,
        })
    }
}

/// The device tensors of one call: `q [T, Hq, D]`, `k_pool`, `v_pool [P, Hkv, D]` (float `F`,
/// contiguous), `kv_indices [nnz]` and `ranges [T, 2]` (i32, contiguous), `out [T, Hq, D]` (`F`)
/// and `lse [T, Hq]` (f32), written; with a split launch, `part_out [chunks, T, Hq, D]` and
/// `part_lse [chunks, T, Hq]` (f32) as scratch (else any live f32 buffers, untouched).
pub struct AttentionArgs {
    /// Queries.
    pub q: TensorArg,
    /// Key pool.
    pub k_pool: TensorArg,
    /// Value pool.
    pub v_pool: TensorArg,
    /// Pool rows of the batch.
    pub kv_indices: TensorArg,
    /// Each query's first entry in `kv_indices` and key count.
    pub ranges: TensorArg,
    /// Output.
    pub out: TensorArg,
    /// Log-sum-exp.
    pub lse: TensorArg,
    /// Split scratch: partial outputs.
    pub part_out: TensorArg,
    /// Split scratch: partial log-sum-exps.
    pub part_lse: TensorArg,
    /// fp8 pools (`[P, Hkv, D / 4]` u32 words of e4m3 codes, [`crate::common::fp8`]) and their
    /// `(k_scale, v_scale)`; `None`: pools of `F`.
    pub fp8_scales: Option<(f32, f32)>,
}

/// The scalars of one call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionScalars {
    /// Scale of the dot products.
    pub sm_scale: f32,
    /// Logits soft cap, if any.
    pub soft_cap: Option<f32>,
}

/// Enqueues the attention of `geometry` as `launch` describes (and, when split, the merge),
/// on the tensors `args` names (called once per launch, twice for the flash form, which binds
/// the queries twice: a `TensorArg` is used up by one).
/// Does nothing for an empty batch.
///
/// # Safety
/// The tensors must be live, contiguous, of the shapes [`AttentionArgs`] gives, `ranges` must
/// stay inside `kv_indices`, and the outputs must not alias an input. Pool rows are
/// bounds-checked by the kernel (a row outside the pool is masked).
pub unsafe fn launch_attention(
    client: &Client,
    float: ElemType,
    geometry: AttentionGeometry,
    launch: AttentionLaunch,
    scalars: AttentionScalars,
    args: impl Fn() -> AttentionArgs,
) {
    let AttentionGeometry {
        num_tokens,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        ..
    } = geometry;
    if num_tokens == 0 || num_qo_heads == 0 || num_kv_heads == 0 || head_dim == 0 {
        return;
    }
    let AttentionLaunch {
        kernel,
        vector,
        units,
        heads,
        chunks,
        chunk_keys,
        fp8_decode,
    } = launch;
    let row_vectors = head_dim / vector;
    let head_blocks = num_qo_heads / num_kv_heads / heads;
    let split = chunks > 1;
    // The query-tile kernels: warps a cube and query rows a cube.
    let query_tiles = match kernel {
        AttentionKernel::Tiles { planes, .. } => Some((planes, planes / heads * TILE)),
        AttentionKernel::Flash(shape) => Some((shape.warps, shape.tile_rows())),
        _ => None,
    };
    let (cubes, cube_dim) = match query_tiles {
        Some((warps, tile_rows)) => (
            num_tokens.div_ceil(tile_rows) * num_kv_heads * head_blocks,
            CubeDim::new_2d(LANES as u32, warps as u32),
        ),
        None => (
            num_tokens * num_kv_heads * head_blocks * chunks,
            CubeDim::new_1d(units as u32),
        ),
    };
    let cube_count = calculate_cube_count_elemwise(client, cubes * units, cube_dim);
    let len = (geometry.pool_size.max(num_tokens) * num_qo_heads.max(num_kv_heads) * head_dim)
        .max(chunks * num_tokens * num_qo_heads * head_dim);
    let soft_cap = scalars.soft_cap.unwrap_or(1.0);
    let first = args();
    // fp8 words are read as vectors of four: a launch planned otherwise is never run.
    if first.fp8_scales.is_some() != geometry.fp8_pools
        || (geometry.fp8_pools && (vector != FP8_VECTOR || !head_dim.is_multiple_of(4)))
    {
        return;
    }
    // The pools' element type and vector width, and their scales.
    let (pool_elem, pool_vector, (k_scale, v_scale), fp8) = match first.fp8_scales {
        Some(scales) => (ElemType::UInt(UIntKind::U32), 1usize, scales, true),
        None => (float, vector, (1.0, 1.0), false),
    };
    match kernel {
        AttentionKernel::Plane {
            lanes,
            vecs,
            steps,
            words,
        } => unsafe {
            attention_plane_kernel::launch_unchecked(
                client,
                cube_count,
                cube_dim,
                AddressType::from_len(len),
                vector,
                pool_vector * words,
                first.q,
                first.k_pool,
                first.v_pool,
                first.kv_indices,
                first.ranges,
                first.out,
                first.lse,
                first.part_out,
                first.part_lse,
                scalars.sm_scale,
                soft_cap,
                f32::NEG_INFINITY,
                chunk_keys as u32,
                chunks as u32,
                head_blocks as u32,
                k_scale,
                v_scale,
                heads,
                units,
                lanes,
                vecs,
                steps,
                row_vectors,
                split,
                scalars.soft_cap.is_some(),
                words,
                fp8,
                fp8_decode,
                [float, pool_elem],
            );
        },
        AttentionKernel::Tiles {
            planes,
            block_keys,
            tensor_cores,
        } => unsafe {
            attention_tiles_kernel::launch_unchecked(
                client,
                cube_count,
                cube_dim,
                AddressType::from_len(len),
                vector,
                pool_vector,
                first.q,
                first.k_pool,
                first.v_pool,
                first.kv_indices,
                first.ranges,
                first.out,
                first.lse,
                scalars.sm_scale,
                soft_cap,
                f32::NEG_INFINITY,
                head_blocks as u32,
                k_scale,
                v_scale,
                heads,
                planes,
                block_keys,
                head_dim,
                row_vectors,
                tensor_cores,
                scalars.soft_cap.is_some(),
                fp8,
                fp8_decode,
                [float, pool_elem],
            );
        },
        AttentionKernel::Flash(shape) => unsafe {
            // fp8 codes are staged as f16 halves, `2^-8` times their values.
            let fp8_factor = if fp8 {
                Fp8Decode::Halves.raw_factor()
            } else {
                1.0
            };
            attention_flash_kernel::launch_unchecked(
                client,
                cube_count,
                cube_dim,
                AddressType::from_len(len),
                if fp8 { 2 } else { 4 },
                first.q,
                args().q,
                first.k_pool,
                first.v_pool,
                first.kv_indices,
                first.ranges,
                first.out,
                first.lse,
                scalars.sm_scale,
                soft_cap,
                f32::NEG_INFINITY,
                head_blocks as u32,
                k_scale * fp8_factor,
                v_scale * fp8_factor,
                FlashShape {
                    capped: scalars.soft_cap.is_some(),
                    ..shape
                },
            );
        },
        AttentionKernel::Heads {
            group,
            pool_vector,
            lean,
        } => unsafe {
            attention_heads_kernel::launch_unchecked(
                client,
                cube_count,
                cube_dim,
                AddressType::from_len(len),
                pool_vector,
                first.q,
                first.k_pool,
                first.v_pool,
                first.kv_indices,
                first.ranges,
                first.out,
                first.lse,
                first.part_out,
                first.part_lse,
                scalars.sm_scale,
                soft_cap,
                f32::NEG_INFINITY,
                chunk_keys as u32,
                chunks as u32,
                k_scale,
                v_scale,
                group,
                head_dim,
                split,
                scalars.soft_cap.is_some(),
                fp8,
                // The device's own e4m3 conversion where it has one (CUDA's C++ backend).
                fp8 && fp8_decode == Fp8Decode::Native && converts_fp8(client),
                lean,
                pool_elem,
            );
        },
        AttentionKernel::Portable => unsafe {
            attention_kernel::launch_unchecked(
                client,
                cube_count,
                cube_dim,
                AddressType::from_len(len),
                vector,
                pool_vector,
                first.q,
                first.k_pool,
                first.v_pool,
                first.kv_indices,
                first.ranges,
                first.out,
                first.lse,
                first.part_out,
                first.part_lse,
                scalars.sm_scale,
                soft_cap,
                f32::NEG_INFINITY,
                chunk_keys as u32,
                chunks as u32,
                head_blocks as u32,
                k_scale,
                v_scale,
                heads,
                units,
                row_vectors,
                split,
                scalars.soft_cap.is_some(),
                fp8,
                fp8_decode,
                [float, pool_elem],
            );
        },
    }
    if split {
        let args = args();
        let hardware = &client.properties().hardware;
        let merge_units = merge_units(
            row_vectors,
            chunks,
            vector,
            hardware.max_units_per_cube as usize,
            hardware.max_shared_memory_size,
        );
        let heads = num_tokens * num_qo_heads;
        let merge_dim = CubeDim::new_1d(merge_units as u32);
        unsafe {
            attention_merge::launch_unchecked(
                client,
                calculate_cube_count_elemwise(client, heads * merge_units, merge_dim),
                merge_dim,
                AddressType::from_len(len),
                vector,
                args.part_out,
                args.part_lse,
                args.out,
                args.lse,
                f32::NEG_INFINITY,
                chunks as u32,
                merge_units,
                chunks.next_power_of_two(),
                row_vectors,
                float,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AttentionGeometry, AttentionLaunch, merge_units, plane_steps};

    #[test]
    fn long_splits_spread_the_merge_over_more_units() {
        // A head of 128 (32 vectors of four): 3 chunks keep 128 units; 256 chunks take 1024
        // where the device allows them (8 chunks a unit), 256 where it allows 300 units, 512
        // where 16 KiB of shared memory holds 512 units' sums and vectors (10 KiB) and not
        // 1024's (20 KiB), besides 256 weights.
        let kib = 1024;
        assert_eq!(merge_units(32, 3, 4, 1024, 48 * kib), 128);
        assert_eq!(merge_units(32, 256, 4, 1024, 48 * kib), 1024);
        assert_eq!(merge_units(32, 256, 4, 300, 48 * kib), 256);
        assert_eq!(merge_units(32, 256, 4, 1024, 16 * kib), 512);
        assert_eq!(merge_units(32, 64, 4, 1024, 48 * kib), 256);
        // A row of more vectors than the device's units keeps one unit a vector.
        assert_eq!(merge_units(256, 1, 4, 128, 48 * kib), 256);
    }

    #[test]
    fn plane_steps_hold_the_swept_bytes_in_flight() {
        // Through SPIR-V (vectors of 4): f16 or f32 heads of 128 at 16 lanes read 2 loads a
        // key, 2 keys a step; at 32 lanes 1 load, 4 keys; a head of 256 at 16 lanes, 1 key.
        assert_eq!(plane_steps(false, 2, 2, 4), 2);
        assert_eq!(plane_steps(false, 1, 1, 4), 4);
        assert_eq!(plane_steps(false, 4, 4, 4), 1);
        // Through CUDA (vectors of 8 halves): 1 load a key, 2 keys a step, not 4.
        assert_eq!(plane_steps(false, 1, 1, 8), 2);
        // Narrow vectors keep the loads' rule; fp8 pools keep it at any width.
        assert_eq!(plane_steps(false, 1, 1, 2), 4);
        assert_eq!(plane_steps(true, 1, 2, 4), 4);
        // More loads a key than the rule allows still read one key a step.
        assert_eq!(plane_steps(false, 8, 8, 4), 1);
        assert_eq!(plane_steps(true, 8, 8, 4), 1);
    }

    /// Llama-3-8B's attention geometry for `num_tokens` query rows, the fewest a sequence has
    /// being `min_query_rows`.
    fn llama(num_tokens: usize, min_query_rows: usize, head_dim: usize) -> AttentionGeometry {
        AttentionGeometry {
            num_tokens,
            num_qo_heads: 32,
            num_kv_heads: 8,
            head_dim,
            pool_size: 1 << 20,
            max_keys: 32_768,
            fp8_pools: false,
            min_query_rows,
        }
    }

    #[test]
    fn query_tile_rows_follow_the_group() {
        let rows: Vec<usize> = [1, 2, 3, 4, 6, 8, 16]
            .into_iter()
            .map(AttentionLaunch::query_tile_rows)
            .collect();
        assert_eq!(rows, [64, 32, 64, 16, 32, 16, 16]);
    }

    #[test]
    fn query_tiles_are_the_normal_launch_of_prefill_only() {
        // Llama's group of 4 on 4 planes: tiles of 16 rows, one cube per row tile and kv head.
        let pays = |g: AttentionGeometry| AttentionLaunch::tiles_pay(g, 16, 1);
        // One 512-token prompt, 64 of them, a 4096-token one: prefill.
        assert!(pays(llama(512, 512, 128)));
        assert!(pays(llama(64 * 512, 512, 128)));
        assert!(pays(llama(4096, 4096, 128)));
        // Decode batches, and a prompt joining 31 decoding sequences.
        assert!(!pays(llama(1, 1, 128)));
        assert!(!pays(llama(64, 1, 128)));
        assert!(!pays(llama(512 + 31, 1, 128)));
        // A 64-token chunk (4 row tiles × 8 kv heads: too few cubes without a split).
        assert!(!pays(llama(64, 64, 128)));
        // Gemma's head of 256: the fragments would not fit the registers.
        assert!(!pays(llama(4096, 4096, 256)));
        // No sequence with queries.
        assert!(!pays(llama(0, 0, 128)));
        // Tiles of 64 rows (no GQA group on 4 planes): sequences of 16 rows would share tiles.
        assert!(!AttentionLaunch::tiles_pay(llama(4096, 16, 128), 64, 1));
        assert!(AttentionLaunch::tiles_pay(llama(4096, 64, 128), 64, 1));
    }
}
