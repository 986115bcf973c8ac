//! Dynamic Resource Allocation as gpu-admission reads it: the CEL grammar of device selectors it can decide
//! ([`cel`]), and a cluster's DeviceClass judged by what its selectors select rather than by its name
//! ([`device_class`]).

pub mod cel;
pub mod device_class;
