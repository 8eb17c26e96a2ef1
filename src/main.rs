fn main() {
    print!("{}", kwok_pools::api::crds_yaml());
}
