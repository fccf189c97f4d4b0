//! The one integration-test binary: everything over real HTTP on 127.0.0.1.

mod actions;
mod airflow;
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
mod manual;
mod moto;
mod needs;
mod pacing;
mod quick;
mod report;
mod restore;
mod schema;
mod util;
