"""The PufferLib recipe: magister tasks and feedback through PufferLib's vector envs."""
