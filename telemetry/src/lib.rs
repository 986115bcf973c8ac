//! Shared telemetry set-up.
