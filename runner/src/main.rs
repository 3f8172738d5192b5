fn main() {
    eprintln!("captf-runner: not built yet");
    std::process::exit(1);
}
