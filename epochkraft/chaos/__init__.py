"""chaos"""
