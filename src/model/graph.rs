//! Decode steps replayed from a captured graph.
//!
//! A decode step launches the same kernels every time; only its inputs change (the tokens,
//! their rows and positions, the rows each sequence attends over). On CubeCL devices, in builds
//! without Burn's fusion stream, a decode step whose shape repeats the step before is captured
//! through Burn's graph capture (CubeCL records the launches once: a CUDA graph on CUDA; on wgpu each launch's
//! pipeline, bindings and metadata resolved once), and later steps of that shape write their
//! inputs into the captured buffers and replay it: no launch code, allocation or binding per
//! kernel on the host.
//!
//! A captured step's shape: its batch (each sequence one token), the pools' buffers, the thread
//! it was captured on, and the attention split, planned for the bucket of key counts the
//! longest sequence is in (`keys_bucket`), so a step whose longest sequence leaves the bucket
//! is captured anew. Steps with several tokens of a sequence (prefill), models with a sliding
//! window, and devices or builds without capture take the launch-by-launch path.

use crate::model::DecoderError;
#[cfg(all(feature = "cube", not(feature = "fusion")))]
use crate::model::decoder::Kernels;
use crate::model::decoder::{Decoder, StepToken};
use crate::pool::KvPool;
use burn::tensor::Tensor;

/// The decode steps a decoder captured (none in builds or on devices without capture).
#[derive(Default)]
pub(crate) struct StepGraphs {
    #[cfg(all(feature = "cube", not(feature = "fusion")))]
    inner: std::sync::Mutex<captured::Captured>,
}

impl StepGraphs {
    /// Captured steps on (`true`, the default) or off.
    pub(crate) fn set_enabled(&self, on: bool) {
        #[cfg(all(feature = "cube", not(feature = "fusion")))]
        {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.set_enabled(on);
        }
        #[cfg(not(all(feature = "cube", not(feature = "fusion"))))]
        let _ = on;
    }

    /// Drops the steps captured over pools that are gone (their buffers, kept allocated for the
    /// graph, go back to the device).
    pub(crate) fn prune(&self) {
        #[cfg(all(feature = "cube", not(feature = "fusion")))]
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).prune();
    }

    /// Steps captured and steps replayed so far, and captured steps kept now.
    #[cfg(feature = "testing")]
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        #[cfg(all(feature = "cube", not(feature = "fusion")))]
        {
            let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            (inner.captured, inner.replayed, inner.kept())
        }
        #[cfg(not(all(feature = "cube", not(feature = "fusion"))))]
        (0, 0, 0)
    }

    /// [`Decoder::step`] through a captured graph where one applies (captured first where its
    /// shape repeats the step before); `None` for a step the caller launches kernel by kernel.
    pub(crate) fn step(
        &self,
        decoder: &Decoder,
        tokens: &[StepToken],
        cache: &mut KvPool,
    ) -> Option<Result<Tensor<2>, DecoderError>> {
        #[cfg(all(feature = "cube", not(feature = "fusion")))]
        {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.step(decoder, tokens, cache)
        }
        #[cfg(not(all(feature = "cube", not(feature = "fusion"))))]
        {
            let _ = (decoder, tokens, cache);
            None
        }
    }
}

#[cfg(all(feature = "cube", not(feature = "fusion")))]
mod captured {
    use super::Kernels;
    use crate::common::cube::cube_tensor;
    use crate::model::DecoderError;
    use crate::model::decoder::{Decoder, StepToken, seq_tokens};
    use crate::pool::{HostStep, KvPool, PoolAttentionPlan};
    use burn::backend::{
        Backend, BackendGraph, BackendTensor, Dispatch, DispatchDevice, DispatchTensor,
        DispatchTensorKind,
    };
    use burn::tensor::{DType, Device, Int, Tensor, TensorData};
    use std::thread::ThreadId;

    /// The most captured steps a decoder keeps (the pages each one's launches used stay
    /// reserved for it).
    const KEPT: usize = 8;

    /// The key counts a captured step's attention is planned for: `keys` rounded up to a quarter of
    /// its power of two (at least 64), so a growing sequence meets a new bucket at each quarter
    /// octave and an attention launch plans for at most a third more keys than its longest
    /// sequence has.
    fn keys_bucket(keys: usize) -> usize {
        let quarter = (keys.max(1).next_power_of_two() / 4).max(64);
        keys.max(1).div_ceil(quarter) * quarter
    }

    /// What a captured step is replayed for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Key {
        batch: usize,
        keys: usize,
        buffers: (u64, u64),
        thread: ThreadId,
    }

    /// The buffers a captured step reads its inputs from.
    struct Inputs {
        /// Token ids, slots and positions, `[batch]`.
        ids: Tensor<1, Int>,
        slots: Tensor<1, Int>,
        positions: Tensor<1, Int>,
        /// The pool rows of every sequence, one after the other, `[batch · keys]` i32.
        indices: Tensor<1, Int>,
        /// Each sequence's first entry in `indices` and its count, `[batch, 2]` i32.
        ranges: Tensor<2, Int>,
    }

    impl Inputs {
        fn new(batch: usize, keys: usize, device: &Device) -> Self {
            // The ids, slots and positions in the dtype the launch-by-launch path uploads.
            let ints = |n: usize| HostStep::zeros(n, device);
            let i32s = |n: usize| {
                Tensor::<1, Int>::from_data(
                    TensorData::new(vec![0i32; n], [n]),
                    (device, DType::I32),
                )
            };
            Self {
                ids: ints(batch),
                slots: ints(batch),
                positions: ints(batch),
                indices: i32s(batch * keys),
                ranges: i32s(2 * batch).reshape([batch, 2]),
            }
        }

        /// Writes a step's inputs in place; `false` where a buffer cannot be written so.
        fn write(&self, tokens: &[StepToken], host: &HostStep) -> bool {
            let ids: Vec<i64> = tokens.iter().map(|t| t.token as i64).collect();
            // Causal, no window: what `PoolAttentionPlan::on_buffers` says the buffer holds.
            let ranges: Vec<i64> = PoolAttentionPlan::ranges_of(&host.qo, &host.kv, true, None)
                .into_iter()
                .flatten()
                .collect();
            write_ints(self.ids.clone().into_dispatch(), &ids)
                && write_ints(self.slots.clone().into_dispatch(), &host.slots)
                && write_ints(self.positions.clone().into_dispatch(), &host.positions)
                && write_ints(self.indices.clone().into_dispatch(), &host.indices)
                && write_ints(self.ranges.clone().into_dispatch(), &ranges)
        }
    }

    /// Writes `values` at the start of `t`'s buffer in its integer dtype; `false` for a tensor
    /// that is not a dense CubeCL integer tensor at least that long.
    fn write_ints(t: DispatchTensor, values: &[i64]) -> bool {
        let Some(c) = cube_tensor(&t) else {
            return false;
        };
        let fits = c.is_contiguous() && c.meta.shape().num_elements() >= values.len();
        let bytes: Vec<u8> = match c.dtype {
            DType::I32 => values
                .iter()
                .flat_map(|&v| i32::try_from(v).unwrap_or(-1).to_le_bytes())
                .collect(),
            DType::I64 => values.iter().flat_map(|&v| v.to_le_bytes()).collect(),
            _ => return false,
        };
        if !fits || bytes.is_empty() {
            return fits;
        }
        c.client
            .write(&c.handle, cubecl::bytes::Bytes::from_bytes_vec(bytes));
        true
    }

    /// A copy of `t` in a buffer of its own (a replay overwrites the captured output).
    fn own_copy(t: &Tensor<2>) -> Tensor<2> {
        let d = t.clone().into_dispatch();
        match cube_tensor(&d) {
            Some(c) => Tensor::from_dispatch(DispatchTensor {
                kind: DispatchTensorKind::Cube(BackendTensor::Float(c.copy())),
                autodiff: d.autodiff,
            }),
            None => t.clone() * 1.0,
        }
    }

    /// A captured step.
    struct Entry {
        key: Key,
        inputs: Inputs,
        /// The captured step's logits: the buffer each replay writes.
        logits: Tensor<2>,
        /// The pool it was captured over (the entry goes when the pool does).
        pool: std::sync::Weak<()>,
        graph: BackendGraph<Dispatch>,
    }

    /// A decoder's captured steps.
    #[derive(Default)]
    pub(super) struct Captured {
        off: bool,
        entries: Vec<Entry>,
        /// Shapes whose capture failed (they take the launch-by-launch path).
        refused: Vec<Key>,
        /// The shape of the step before, launched: a shape is captured at its second step in a
        /// row, so that batches changing every step (requests coming and going) launch their
        /// steps rather than capture each one.
        last: Option<Key>,
        pub(super) captured: usize,
        pub(super) replayed: usize,
    }

    /// Whether a step can be captured: a CubeCL device, each sequence one token, no sliding
    /// window.
    fn eligible(decoder: &Decoder, tokens: &[StepToken]) -> bool {
        if tokens.is_empty()
            || !matches!(decoder.device().as_dispatch(), DispatchDevice::Cube(_))
            || (0..decoder.layer_count()).any(|l| decoder.config.window(l).is_some())
        {
            return false;
        }
        let mut seqs: Vec<_> = tokens.iter().map(|t| t.seq).collect();
        seqs.sort_unstable();
        seqs.windows(2).all(|w| w[0] != w[1])
    }

    impl Captured {
        #[cfg(feature = "testing")]
        pub(super) fn kept(&self) -> usize {
            self.entries.len()
        }

        pub(super) fn prune(&mut self) {
            self.entries.retain(|e| e.pool.strong_count() > 0);
        }

        pub(super) fn set_enabled(&mut self, on: bool) {
            self.off = !on;
            if !on {
                self.entries.clear();
            }
        }

        pub(super) fn step(
            &mut self,
            decoder: &Decoder,
            tokens: &[StepToken],
            cache: &mut KvPool,
        ) -> Option<Result<Tensor<2>, DecoderError>> {
            // A pool a caller holds a clone of is copied by the launched write, never changed
            // in place.
            if self.off || !eligible(decoder, tokens) || !cache.sole_holder() {
                return None;
            }
            if let Err(e) = decoder.check_step(tokens, cache) {
                return Some(Err(e));
            }
            self.prune();
            let host = match cache.plan_host(&seq_tokens(tokens)) {
                Ok(host) => host,
                Err(e) => return Some(Err(e.into())),
            };
            let longest = host.kv.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
            let key = Key {
                batch: tokens.len(),
                keys: keys_bucket(longest.max(0) as usize),
                buffers: cache.buffers_key(),
                thread: std::thread::current().id(),
            };
            let device = decoder.device().as_dispatch().clone();
            if let Some(at) = self.entries.iter().position(|e| e.key == key) {
                let entry = &self.entries[at];
                if entry.inputs.write(tokens, &host) {
                    // Safety: every buffer the graph reads or writes is alive: the decoder's
                    // weights, the pools (`key.buffers`: the same buffers as at capture), the
                    // inputs and output held by the entry, and the step's other buffers on the
                    // pages the graph keeps reserved; the inputs were written and the output
                    // is copied on this thread's stream, the capture's (`key.thread`).
                    let replayed = unsafe { Dispatch::graph_replay(&device, &entry.graph) };
                    if replayed.is_ok() {
                        self.replayed += 1;
                        return Some(Ok(own_copy(&entry.logits)));
                    }
                }
                // Not replayed: this shape takes the launch-by-launch path from now on.
                self.entries.remove(at);
                self.refused.push(key);
            }
            let repeated = self.last.replace(key) == Some(key);
            if !repeated || self.refused.contains(&key) {
                return Some(decoder.run_host_step(&Kernels, tokens, host, cache));
            }
            Some(self.capture(decoder, tokens, host, cache, key, device))
        }

        /// Runs the step (its result) and captures it for the next steps of its shape.
        fn capture(
            &mut self,
            decoder: &Decoder,
            tokens: &[StepToken],
            host: HostStep,
            cache: &mut KvPool,
            key: Key,
            device: DispatchDevice,
        ) -> Result<Tensor<2>, DecoderError> {
            // Steps captured over other buffers are never replayed again.
            self.entries.retain(|e| e.key.buffers == key.buffers);
            self.refused.retain(|k| k.buffers == key.buffers);
            if self.entries.len() >= KEPT {
                self.entries.remove(0);
            }
            let on = Device::new(device.clone());
            let inputs = Inputs::new(key.batch, key.keys, &on);
            if !inputs.write(tokens, &host) {
                self.refused.push(key);
                return decoder.run_host_step(&Kernels, tokens, host, cache);
            }
            let run = |cache: &mut KvPool| {
                let attention = PoolAttentionPlan::on_buffers(
                    host.qo.clone(),
                    host.kv.clone(),
                    host.indices.clone(),
                    inputs.indices.clone(),
                    inputs.ranges.clone(),
                    key.keys,
                    &on,
                );
                let step = host.clone().on_buffers(
                    inputs.slots.clone(),
                    inputs.positions.clone(),
                    attention,
                );
                decoder.run_step(&Kernels, inputs.ids.clone(), &step, cache)
            };
            if Dispatch::graph_prepare(&device).is_err() {
                self.refused.push(key);
                return decoder.run_host_step(&Kernels, tokens, host, cache);
            }
            // The step itself (run twice: the second run leaves free every buffer the capture
            // asks for, with the first one's logits still held), then its capture.
            let first = match run(cache) {
                Ok(logits) => logits,
                Err(e) => {
                    let _ = Dispatch::graph_stop_capture(&device);
                    cache.cancel_rows(&host.sequences);
                    return Err(e);
                }
            };
            let again = run(cache).is_ok();
            let graph = match again && Dispatch::graph_start_capture(&device).is_ok() {
                true => {
                    let recorded = run(cache);
                    Dispatch::graph_stop_capture(&device)
                        .ok()
                        .zip(recorded.ok())
                }
                false => {
                    let _ = Dispatch::graph_stop_capture(&device);
                    None
                }
            };
            match graph {
                Some((graph, logits)) => {
                    self.captured += 1;
                    self.entries.push(Entry {
                        key,
                        inputs,
                        logits,
                        pool: cache.alive(),
                        graph,
                    })
                }
                None => self.refused.push(key),
            }
            Ok(first)
        }
    }
}
