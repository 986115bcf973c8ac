//! What a Pod asks for: its job features (read from annotations and resources) and its GPU resources.

pub mod features;
pub mod gpu_resources;
