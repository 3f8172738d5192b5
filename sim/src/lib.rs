//! `captf-sim`: a Kubernetes API server and Job/Pod simulator (DESIGN.md §12). A test double,
//! not a product.
