//! The one integration-test binary: everything over real HTTP on 127.0.0.1.

mod actions;
mod api;
mod architecture;
mod cli;
mod demo;
mod emulator_http;
mod extract;
mod fleet;
mod health;
mod lake;
mod load;
mod moto;
mod pacing;
mod quick;
mod readme;
mod report;
mod restore;
mod schema;
mod util;
