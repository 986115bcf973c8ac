//! The admission path: decode the AdmissionReview, read the Pod's features, decide, build the JSON Patch,
//! encode the response.

pub mod checkpoint_restore;
pub mod decide;
pub mod features;
pub mod handler;
pub mod patch;
pub mod review;
