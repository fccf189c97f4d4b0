//! creator-etl: extract a creator-marketing service's data, shape it for analysts, and replay
//! reviewed corrections.
//!
//! The flow runs one way: [`api`] → extract → transform → load; [`action`] uses the API and the
//! warehouse; the [`emulator`] shares only the API's models. `main.rs` only parses arguments, sets
//! up logging and maps [`app::run`]'s result to an exit code.

pub mod action;
pub mod api;
pub mod app;
pub mod cli;
pub mod demo;
pub mod emulator;
mod error;
pub mod extract;
pub mod fleet;
pub mod load;
pub mod out;
pub mod progress;
pub mod query;
#[cfg(test)]
mod testing;
pub mod transform;

pub use error::{exit, Error};
