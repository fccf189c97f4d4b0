//! The one integration-test binary: everything over real HTTP on 127.0.0.1.

mod api;
mod cli;
mod emulator_http;
mod extract;
mod pacing;
mod readme;
mod util;
