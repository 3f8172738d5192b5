//! The runner binary: the container's PID 1. All logic is in the library.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let code = captf_runner::main_entry().await;
    std::process::exit(code);
}
