//! creator-etl: extract a creator-marketing service's data, shape it for analysts, and replay
//! reviewed corrections.
//!
//! The flow runs one way: [`api`] → extract → transform → load; actions use the API and the
//! warehouse; the [`emulator`] shares only the API's models. `main.rs` only parses arguments, sets
//! up logging and maps [`app::run`]'s result to an exit code.

pub mod api;
pub mod app;
pub mod cli;
pub mod emulator;
mod error;
pub mod extract;
pub mod out;
pub mod progress;

pub use error::{exit, Error};
