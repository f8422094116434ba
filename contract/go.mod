module rekindle.local/contract

go 1.22
