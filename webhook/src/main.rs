fn main() {
    eprintln!("captf-webhook: not built yet");
    std::process::exit(2);
}
