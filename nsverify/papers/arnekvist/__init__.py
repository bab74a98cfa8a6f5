"""nsverify/papers/arnekvist"""
