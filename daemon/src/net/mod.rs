//! Every byte that leaves or enters from outside: the egress edge (SSRF filter, rules,
//! approvals asked in chat, credentials swapped in, the web proxy and search), and taint, which
//! marks what came from outside wherever it flows. It imports store/ and below.

pub mod egress;
pub mod taint;
