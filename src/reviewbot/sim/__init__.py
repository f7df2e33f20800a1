"""The forge simulator: a stateful fake of the GitHub and Gitea APIs over real HTTP."""
