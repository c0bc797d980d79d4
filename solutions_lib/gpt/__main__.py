from solutions_lib.gpt.train import main

main()
