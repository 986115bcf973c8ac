//! Test harness: starts the real binaries as processes.
