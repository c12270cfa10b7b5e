mod cli;
mod flood;
mod grpc;
mod properties;
mod session;
