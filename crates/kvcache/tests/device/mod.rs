//! The devices the device suites run on: the CPU always, CUDA device 0
//! when the `cuda` feature is on and a device opens.

use candle_core::Device;

/// The device called `name` (`cpu` or `cuda`), or why it cannot run here;
/// suites print that reason as `device NAME: skipped (...)`, which
/// `scripts/gpu-check run` treats as a failure for `cuda`.
pub fn open(name: &str) -> Result<Device, String> {
    match name {
        "cpu" => Ok(Device::Cpu),
        #[cfg(feature = "cuda")]
        "cuda" => Device::new_cuda(0).map_err(|e| format!("no CUDA device 0: {e}")),
        #[cfg(not(feature = "cuda"))]
        "cuda" => Err("built without the `cuda` feature".to_string()),
        other => Err(format!("unknown device {other}")),
    }
}
