//! Tensor parallelism: one decoder over several devices, Megatron-style. Each rank holds a
//! shard ([`Decoder::shard`]): q/k/v and gate/up split by output columns (whole kv heads and
//! their q groups per rank), o and down by input columns, the LM head by vocabulary rows; norms
//! and embeddings whole on every rank, so every rank keeps the same residual stream. A layer
//! needs two sums over the ranks (after o, after down) and a step one gather (the logits); both
//! go through a [`Collective`]. RoPE, the pool write and attention are head-local: each rank's
//! own [`KvPool`] holds its heads' keys and values, and one driver thread runs every rank.

use crate::model::decoder::{Kernels, Pending, StepState, seq_tokens};
use crate::model::{Decoder, DecoderConfig, DecoderError, StepToken};
use crate::pool::{KvPool, KvPoolError, SeqId, StepPlan};
use burn::tensor::{DType, Device, Tensor};

/// How the ranks of a [`ShardedDecoder`] combine their partial results.
pub trait Collective: Send + Sync {
    /// The element-wise sum of `parts` (one per rank, each on its rank's device, one shape),
    /// back on every rank's device: one tensor per rank, in rank order.
    fn all_reduce_sum(&self, parts: Vec<Tensor<2>>) -> Vec<Tensor<2>>;

    /// The devices the collective was made for, in rank order, where it was made for some
    /// (a [`ShardedDecoder`] must have the same; `None`: any).
    fn devices(&self) -> Option<&[Device]> {
        None
    }

    /// `parts` (one per rank, `[rows, columns of the rank]`) side by side on the first rank's
    /// device: `[rows, all columns]`, ranks in order.
    fn gather_columns(&self, parts: Vec<Tensor<2>>) -> Tensor<2> {
        let device = parts[0].device();
        Tensor::cat(parts.into_iter().map(|p| p.to_device(&device)).collect(), 1)
    }
}

/// The sums computed in this process: the parts moved to the first rank's device, added in rank
/// order in f32, rounded once to their dtype and copied to each rank's device. Works on any
/// devices (several shards on one device or on Flex included); on several GPUs each sum crosses
/// the host.
#[derive(Clone, Copy, Debug, Default)]
pub struct InProcess;

impl Collective for InProcess {
    fn all_reduce_sum(&self, parts: Vec<Tensor<2>>) -> Vec<Tensor<2>> {
        let devices: Vec<Device> = parts.iter().map(Tensor::device).collect();
        let first = devices[0].clone();
        let dtype = parts[0].dtype();
        let sum = parts
            .into_iter()
            .map(|p| p.to_device(&first).cast(DType::F32))
            .reduce(|a, b| a + b)
            .expect("one part a rank")
            .cast(dtype);
        devices.iter().map(|d| sum.clone().to_device(d)).collect()
    }
}

/// Burn's collective all-reduce (`burn::tensor::distributed`: NCCL on CUDA devices), over a
/// [`DistributedContext`](burn::tensor::distributed::DistributedContext) it starts for the
/// devices and closes when dropped. CUDA devices only (Burn's other runtimes have no
/// collectives): use [`InProcess`] elsewhere.
pub struct BurnAllReduce {
    devices: Vec<Device>,
    _context: burn::tensor::distributed::DistributedContext,
}

impl BurnAllReduce {
    /// Starts Burn's communication server for `devices` (the ranks, in order); refused unless
    /// they are distinct CUDA devices. One a process: Burn's server is global.
    pub fn new(devices: Vec<Device>) -> Result<Self, DecoderError> {
        if devices.is_empty() || devices.iter().any(|d| runtime(d) != "Cube(Cuda") {
            return Err(DecoderError::Parallel(format!(
                "Burn's all-reduce runs on CUDA devices, not {devices:?}"
            )));
        }
        if (1..devices.len()).any(|i| devices[..i].contains(&devices[i])) {
            return Err(DecoderError::Parallel(format!(
                "Burn's all-reduce needs one rank a device, not {devices:?}"
            )));
        }
        use burn::tensor::distributed::{DistributedConfig, DistributedContext, ReduceOperation};
        let config = DistributedConfig {
            all_reduce_op: ReduceOperation::Sum,
        };
        let context = DistributedContext::init(devices.clone(), config);
        Ok(Self {
            devices,
            _context: context,
        })
    }
}

impl Collective for BurnAllReduce {
    fn devices(&self) -> Option<&[Device]> {
        Some(&self.devices)
    }

    fn all_reduce_sum(&self, parts: Vec<Tensor<2>>) -> Vec<Tensor<2>> {
        use burn::tensor::distributed::{ReduceOperation, all_reduce};
        let pending: Vec<_> = parts
            .into_iter()
            .map(|p| all_reduce(p, ReduceOperation::Sum, self.devices.clone()))
            .collect();
        pending.into_iter().map(|c| c.resolve()).collect()
    }
}

/// The refusals of a split of a decoder of `config` over `devices`, shards of `bytes` each
/// (see [`ShardedDecoder::new`]).
pub(crate) fn check(
    config: &DecoderConfig,
    devices: &[Device],
    bytes: u64,
) -> Result<(), DecoderError> {
    let ranks = devices.len();
    let refuse = |why: String| Err(DecoderError::Parallel(why));
    if ranks == 0 {
        return refuse("no devices".into());
    }
    let (hkv, m) = (config.rope.num_kv_heads, config.intermediate_size);
    if !hkv.is_multiple_of(ranks) || !m.is_multiple_of(ranks) || ranks > config.vocab_size {
        return refuse(format!(
            "{ranks} ranks do not divide {hkv} kv heads and an MLP of {m} (or outnumber a vocabulary of {})",
            config.vocab_size
        ));
    }
    if devices.iter().any(|d| runtime(d) != runtime(&devices[0])) {
        return refuse(format!("devices of different kinds: {devices:?}"));
    }
    for device in devices {
        // Several ranks on one device hold a shard each.
        let shards = devices.iter().filter(|d| *d == device).count() as u64;
        let need = bytes.saturating_mul(shards);
        // A device index past the machine's GPUs panics when its client opens.
        let limit = std::panic::catch_unwind(|| crate::pool::memory_limit(device, u64::MAX));
        let Ok(limit) = limit else {
            return refuse(format!("{device:?} cannot be opened"));
        };
        if let Some((limit, source)) = limit
            && need > limit
        {
            return refuse(format!(
                "shards of {need} bytes on {device:?}, more than {limit} bytes {source}"
            ));
        }
    }
    Ok(())
}

/// A device's runtime: its dispatch device's debug name up to the second parenthesis
/// (`Cube(Cuda`, `Cube(Wgpu`, `Flex(FlexDevice)`).
fn runtime(device: &Device) -> String {
    let name = format!("{:?}", device.as_dispatch());
    let cut = name
        .match_indices('(')
        .nth(1)
        .map_or(name.len(), |(i, _)| i);
    name[..cut].to_string()
}

/// The KV pools of a [`ShardedDecoder`]: one [`KvPool`] a rank (its heads, on its device), the
/// same rows allocated in each.
pub struct ShardedCache {
    pools: Vec<KvPool>,
}

impl ShardedCache {
    /// Rows free (the same in every rank's pool).
    pub fn available(&self) -> usize {
        self.pools[0].available()
    }

    /// Frees sequence `seq`'s rows in every rank's pool; the rows freed (the pools allocate
    /// alike: the first rank's answer is every rank's).
    pub fn release(&mut self, seq: SeqId) -> Result<usize, KvPoolError> {
        let results: Vec<_> = self.pools.iter_mut().map(|p| p.release(seq)).collect();
        results
            .into_iter()
            .next()
            .unwrap_or(Err(KvPoolError::UnknownSequence { seq }))
    }

    /// Rank `rank`'s pool (`None` past the ranks).
    pub fn rank(&self, rank: usize) -> Option<&KvPool> {
        self.pools.get(rank)
    }
}

/// A decoder split over several devices (see the module doc): [`ShardedDecoder::step`] takes
/// the same tokens and gives the same logits as [`Decoder::step`] (the sums over ranks in
/// another order: within rounding).
pub struct ShardedDecoder {
    config: DecoderConfig,
    ranks: Vec<Decoder>,
    collective: Box<dyn Collective>,
}

impl ShardedDecoder {
    /// `decoder` split into `devices.len()` shards, shard `r` on `devices[r]`, combined through
    /// `collective`. Refused (nothing moved) where the ranks do not divide the kv heads or the
    /// MLP width, outnumber the vocabulary, are none, mix device kinds, or a shard's weights are
    /// more than its device can hold.
    pub fn new(
        decoder: &Decoder,
        devices: &[Device],
        collective: Box<dyn Collective>,
    ) -> Result<Self, DecoderError> {
        check(&decoder.config, devices, decoder.shard_bytes(devices.len()))?;
        if let Some(made_for) = collective.devices()
            && made_for != devices
        {
            return Err(DecoderError::Parallel(format!(
                "a collective made for {made_for:?}, the ranks are {devices:?}"
            )));
        }
        let ranks = devices.len();
        Ok(Self {
            config: decoder.config.clone(),
            ranks: (0..ranks)
                .map(|r| decoder.shard(r, ranks, &devices[r]))
                .collect(),
            collective,
        })
    }

    /// The decoder of `config` whose shards are `ranks` (as [`Decoder::shard`] makes them),
    /// combined through `collective`.
    #[cfg(feature = "testing")]
    pub(crate) fn from_ranks(
        config: DecoderConfig,
        ranks: Vec<Decoder>,
        collective: Box<dyn Collective>,
    ) -> Self {
        Self {
            config,
            ranks,
            collective,
        }
    }

    /// The ranks' shards, in order.
    pub fn ranks(&self) -> &[Decoder] {
        &self.ranks
    }

    /// The whole model's architecture.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// Empty pools of `pool_rows` rows, one a rank (each refused as [`Decoder::new_cache`]).
    pub fn new_cache(&self, pool_rows: usize) -> Result<ShardedCache, KvPoolError> {
        self.new_cache_within(pool_rows, None)
    }

    /// [`Self::new_cache`], each rank's pools also refused past `limit` bytes if given.
    pub(crate) fn new_cache_within(
        &self,
        pool_rows: usize,
        limit: Option<u64>,
    ) -> Result<ShardedCache, KvPoolError> {
        let pools = self
            .ranks
            .iter()
            .map(|rank| rank.new_cache_within(pool_rows, limit))
            .collect::<Result<_, _>>()?;
        Ok(ShardedCache { pools })
    }

    /// [`Decoder::step`] over the ranks: the logits `[S, vocab]` on the first rank's device.
    /// A refused step keeps no rows in any rank's pool.
    pub fn step(
        &self,
        tokens: &[StepToken],
        cache: &mut ShardedCache,
    ) -> Result<Tensor<2>, DecoderError> {
        if cache.pools.len() != self.ranks.len() {
            return Err(DecoderError::Cache(format!(
                "{} pools for {} ranks",
                cache.pools.len(),
                self.ranks.len()
            )));
        }
        for (rank, pool) in self.ranks.iter().zip(&cache.pools) {
            rank.check_step(tokens, pool)?;
        }
        let planned = seq_tokens(tokens);
        // The pools allocate alike: each rank plans the same rows.
        let mut steps: Vec<StepPlan> = Vec::with_capacity(self.ranks.len());
        for pool in cache.pools.iter_mut() {
            match pool.plan_step(&planned) {
                Ok(step) => steps.push(step),
                Err(e) => {
                    for (pool, step) in cache.pools.iter_mut().zip(steps) {
                        pool.cancel_step(step);
                    }
                    return Err(e.into());
                }
            }
        }
        let result = self.run_step(tokens, &steps, &mut cache.pools);
        if result.is_err() {
            for (pool, step) in cache.pools.iter_mut().zip(steps) {
                pool.cancel_step(step);
            }
        }
        result
    }

    fn run_step(
        &self,
        tokens: &[StepToken],
        steps: &[StepPlan],
        pools: &mut [KvPool],
    ) -> Result<Tensor<2>, DecoderError> {
        let ops = Kernels;
        let mut states: Vec<StepState> = self.ranks.iter().map(|r| r.embed_step(tokens)).collect();
        let layers = self.ranks[0].layer_count();
        for l in 0..layers {
            let mut parts = Vec::with_capacity(self.ranks.len());
            for (r, rank) in self.ranks.iter().enumerate() {
                parts.push(rank.attention_half(
                    &ops,
                    l,
                    &mut states[r],
                    &steps[r],
                    &mut pools[r],
                )?);
            }
            let o = self.collective.all_reduce_sum(parts);
            let parts: Vec<Tensor<2>> = self
                .ranks
                .iter()
                .zip(states.iter_mut())
                .zip(o)
                .map(|((rank, state), o)| rank.mlp_half(&ops, l, state, o))
                .collect();
            for (state, mlp) in states.iter_mut().zip(self.collective.all_reduce_sum(parts)) {
                state.pending = Some(Pending::Rows(mlp));
            }
        }
        let logits = self
            .ranks
            .iter()
            .zip(states)
            .zip(steps)
            .map(|((rank, state), step)| rank.logits(&ops, state, step))
            .collect();
        Ok(self.collective.gather_columns(logits))
    }
}
