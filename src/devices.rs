//! Picking a device by name, as the examples and benchmarks take it on the command line.

use burn::tensor::Device;

/// The device names this build can open: `flex`, `wgpu`, `vulkan`, `metal`, `cuda`, `default`.
pub fn device_by_name(name: &str) -> Result<Device, String> {
    #[cfg(feature = "wgpu")]
    use burn::tensor::DeviceKind;
    match name {
        "default" => Ok(Device::default()),
        #[cfg(feature = "flex")]
        "flex" => Ok(Device::flex()),
        #[cfg(feature = "wgpu")]
        "wgpu" => Ok(Device::wgpu(DeviceKind::DefaultDevice)),
        #[cfg(feature = "vulkan")]
        "vulkan" => Ok(Device::vulkan(DeviceKind::DefaultDevice)),
        #[cfg(feature = "metal")]
        "metal" => Ok(Device::metal(DeviceKind::DefaultDevice)),
        #[cfg(feature = "cuda")]
        "cuda" => Ok(Device::cuda(0usize)),
        other => Err(format!(
            "device `{other}` is not available in this build (enable its cargo feature)"
        )),
    }
}
