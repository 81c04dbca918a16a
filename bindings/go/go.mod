module github.com/nexar-project/nexar/bindings/go

go 1.19
