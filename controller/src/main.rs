fn main() {
    eprintln!("captf-controller: not built yet");
    std::process::exit(2);
}
