//! What the `generate` and `serve` examples share: the flags for fp8 KV pools and tensor
//! parallelism, and how a checkpoint to be split is loaded.

use burn::tensor::Device;
use burn_rope_pool::model::{Collective, Quantization};
use burn_rope_pool::testing::{device_by_name, ranks_by_name};
use std::path::Path;

/// The KV-pool and tensor-parallel flags.
#[derive(clap::Args)]
pub struct PoolAndRanks {
    /// Keys and values as fp8 e4m3 in the KV pools, with these scales `K_SCALE,V_SCALE` (a
    /// stored code is e4m3(x / scale); half the bytes of f16). Default: the run dtype.
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        value_name = "K_SCALE,V_SCALE"
    )]
    pub fp8_cache: Option<Vec<f32>>,
    /// Tensor parallelism: the model split over this many GPUs (`DEVICE:0` …; read into host
    /// memory first, an fp8 checkpoint onto the first GPU), summed by Burn's all-reduce on
    /// `cuda`, in process elsewhere.
    #[arg(long, default_value_t = 1)]
    pub tp: usize,
}

impl PoolAndRanks {
    /// `--fp8-cache` as the decoder takes it.
    pub fn fp8_cache(&self) -> Result<Option<(f32, f32)>, String> {
        match self.fp8_cache.as_deref() {
            None => Ok(None),
            Some(&[k, v]) => Ok(Some((k, v))),
            Some(other) => Err(format!("--fp8-cache takes K_SCALE,V_SCALE, got {other:?}")),
        }
    }

    /// With `--tp` past 1, the ranks `DEVICE:0` … and their collective, and where the
    /// checkpoint in `model_dir` loads first (its `config.json` read for that).
    pub fn ranks(&self, device: &str, model_dir: &Path) -> Result<Option<Ranks>, String> {
        if self.tp <= 1 {
            return Ok(None);
        }
        let (devices, collective) = ranks_by_name(device, self.tp)?;
        let path = model_dir.join("config.json");
        let config = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let config: serde_json::Value = serde_json::from_str(&config)
            .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))?;
        let fp8 = Quantization::from_config(&config)
            .map_err(|e| e.to_string())?
            .is_some();
        let load = match fp8 {
            true => devices[0].clone(),
            false => device_by_name("flex").unwrap_or_else(|_| devices[0].clone()),
        };
        Ok(Some(Ranks {
            devices,
            collective,
            load,
        }))
    }
}

/// A tensor-parallel run's ranks.
pub struct Ranks {
    /// `DEVICE:0` …
    pub devices: Vec<Device>,
    /// What sums over them.
    pub collective: Box<dyn Collective>,
    /// Where the checkpoint loads before it is split: the first rank's device for an fp8
    /// checkpoint (its projections stay fp8 for the shards), else host memory where the build
    /// has Flex.
    pub load: Device,
}
