//! Shared by the kernel tests that launch on wgpu.

use cubecl::Device;
use cubecl::client::Client;
use cubecl::wgpu::WgpuDevice;

/// The wgpu client, or `None` (the test named `what` skipped) without an adapter; with
/// `CI=true` a missing adapter fails.
pub fn client(what: &str) -> Option<Client> {
    match std::panic::catch_unwind(|| Device::Wgpu(WgpuDevice::default()).client()) {
        Ok(client) => Some(client),
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true but no wgpu adapter: install mesa-vulkan-drivers (software Vulkan)")
        }
        Err(_) => {
            eprintln!("no wgpu adapter here: {what} skipped");
            None
        }
    }
}
